"""Checksummed downloads: stream to a temporary file, verify MD5, rename atomically.

Used by the MNIST-family and CIFAR readers; anything else may use it too.  Status
goes to stderr (where from, where to, how big); a progress line is drawn only when
stderr is a terminal.
"""
from __future__ import annotations

import hashlib
import http.client
import os
import sys
import tempfile
import urllib.error
import urllib.request
from pathlib import Path
from typing import Optional, Sequence, Union

from ..errors import RsmoothError, check
from ..fileio import umask
from ..progress import progress_bar

__all__ = ["download_file", "md5_file", "TIMEOUT_S"]

#: Seconds to wait for a server to answer (connect and each read).
TIMEOUT_S = 60.0
_CHUNK = 1 << 20


class _NetworkError(Exception):
    """A mirror failed (unreachable, HTTP error, connection dropped): try the next one."""


def md5_file(path: Union[str, "os.PathLike[str]"], chunk_size: int = _CHUNK, *, offset: int = 0,
             size: Optional[int] = None) -> str:
    """Hex MD5 of a file (or of its ``size`` bytes from ``offset``: a member of a tar), read in chunks."""
    digest = hashlib.md5(usedforsecurity=False)
    with open(path, "rb") as f:
        f.seek(offset)
        left = size
        while left is None or left > 0:
            block = f.read(chunk_size if left is None else min(left, chunk_size))
            if not block:
                check(left is None, f"{path} is truncated")
                break
            digest.update(block)
            if left is not None:
                left -= len(block)
    return digest.hexdigest()


def _size(nbytes: Optional[int]) -> str:
    if nbytes is None:
        return "size unknown"
    if nbytes < 1024 * 1024:
        return f"{nbytes / 1024:.1f} KB"
    return f"{nbytes / (1024 * 1024):.1f} MB"


def download_file(
    urls: Union[str, Sequence[str]],
    dest: Union[str, "os.PathLike[str]"],
    md5: str,
    size_hint: Optional[int] = None,
) -> Path:
    """Download ``dest`` from the first mirror in ``urls`` that answers; return ``dest``.

    The file is streamed to a temporary file next to ``dest`` while its MD5 is computed;
    only a file whose MD5 equals ``md5`` is renamed to ``dest`` (atomically, so readers
    never see a partial file).  A network error (unreachable host, HTTP 404, dropped
    connection) moves on to the next mirror; a checksum mismatch deletes the temporary
    file and raises :class:`RsmoothError` at once.  If ``dest`` already exists with the
    right MD5 nothing is downloaded.  ``size_hint`` (bytes) is shown when the server
    sends no Content-Length.
    """
    url_list = [urls] if isinstance(urls, str) else list(urls)
    check(len(url_list) > 0, "download_file needs at least one URL")
    md5 = md5.lower()
    dest = Path(dest)
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise RsmoothError(f"cannot create folder {dest.parent} for the download: {e}") from None
    if dest.is_file() and md5_file(dest) == md5:
        return dest
    failures = []
    for url in url_list:
        try:
            _fetch(url, dest, md5, size_hint)
            return dest
        except _NetworkError as e:
            failures.append(f"{url}: {e}")
            print(f"rsmooth: download from {url} failed ({e})", file=sys.stderr)
    raise RsmoothError(f"could not download {dest.name} from any mirror ({'; '.join(failures)})")


def _fetch(url: str, dest: Path, md5: str, size_hint: Optional[int]) -> None:
    from ..version import __version__

    request = urllib.request.Request(url, headers={"User-Agent": f"rsmooth/{__version__}"})
    try:
        response = urllib.request.urlopen(request, timeout=TIMEOUT_S)
    except urllib.error.HTTPError as e:
        raise _NetworkError(f"HTTP {e.code} {e.reason}") from None
    except urllib.error.URLError as e:
        raise _NetworkError(str(e.reason)) from None
    except (OSError, http.client.HTTPException, ValueError) as e:
        raise _NetworkError(str(e) or type(e).__name__) from None
    with response:
        announced = response.length  # Content-Length (http.client counts it down while reading)
        total = announced if announced is not None else size_hint
        print(f"rsmooth: downloading {url} -> {dest} ({_size(total)})", file=sys.stderr)
        try:
            fd, tmp_name = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.", suffix=".part")
        except OSError as e:
            raise RsmoothError(f"cannot write to {dest.parent}: {e}") from None
        tmp = Path(tmp_name)
        try:
            digest = hashlib.md5(usedforsecurity=False)
            done = 0
            bar = progress_bar(total=total, desc=dest.name, unit="B", unit_scale=True, unit_divisor=1024)
            with bar, os.fdopen(fd, "wb") as out:
                while True:
                    try:
                        block = response.read(_CHUNK)
                    except (OSError, http.client.HTTPException) as e:
                        raise _NetworkError(f"connection failed after {_size(done)}: {e or type(e).__name__}") from None
                    if not block:
                        break
                    try:
                        out.write(block)
                    except OSError as e:
                        raise RsmoothError(f"cannot write {tmp}: {e}") from None
                    digest.update(block)
                    done += len(block)
                    bar.update(len(block))
            if announced is not None and done < announced:
                raise _NetworkError(f"connection closed after {done} of {announced} bytes")
            got = digest.hexdigest()
            if got != md5:
                raise RsmoothError(
                    f"checksum mismatch for {url}: MD5 {got}, expected {md5}; "
                    f"the download was deleted and {dest} was not written"
                )
            os.chmod(tmp, 0o666 & ~umask())  # mkstemp's 0600 would hide a shared data folder
            os.replace(tmp, dest)
        finally:
            if tmp.exists():
                tmp.unlink()
