"""Reader for the IDX format of MNIST and Fashion-MNIST (LeCun et al., "THE MNIST DATABASE").

An IDX file is a 4-byte magic number ``00 00 <type> <ndim>``, ``ndim`` big-endian
uint32 dimension sizes, then the data in big-endian, row-major order.  Files may be
gzipped.  Anything that does not parse exactly (bad magic, unknown type, truncated or
trailing data, broken gzip) raises :class:`RsmoothError` naming the file.
"""
from __future__ import annotations

import gzip
import math
import os
import struct
import zlib
from pathlib import Path
from typing import Union

import numpy as np

from ..errors import RsmoothError, check

__all__ = ["read_idx", "read_idx_bytes", "parse_idx", "IDX_DTYPES"]

#: IDX type code -> big-endian NumPy dtype.
IDX_DTYPES = {
    0x08: ">u1",
    0x09: ">i1",
    0x0B: ">i2",
    0x0C: ">i4",
    0x0D: ">f4",
    0x0E: ">f8",
}


def read_idx_bytes(path: Union[str, "os.PathLike[str]"]) -> bytes:
    """The (decompressed) bytes of an IDX file; ``.gz`` files and gzip content are inflated."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as e:
        raise RsmoothError(f"cannot read {path}: {e}") from None
    if path.suffix == ".gz" or data[:2] == b"\x1f\x8b":
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError, zlib.error) as e:
            raise RsmoothError(f"{path} is not a valid gzip file (corrupt or truncated: {e})") from None
    return data


def parse_idx(data: bytes, source: str = "<bytes>") -> np.ndarray:
    """Parse IDX bytes into a NumPy array in native byte order (a copy, writable)."""
    check(len(data) >= 4, f"{source} is not an IDX file (only {len(data)} bytes)")
    zero0, zero1, code, ndim = data[0], data[1], data[2], data[3]
    check(
        zero0 == 0 and zero1 == 0,
        f"{source} is not an IDX file (magic number {data[:4].hex()} should start with 0000)",
    )
    check(code in IDX_DTYPES, f"{source} is not an IDX file (unknown data type 0x{code:02x})")
    check(ndim >= 1, f"{source} is not an IDX file (0 dimensions)")
    header = 4 + 4 * ndim
    check(len(data) >= header, f"{source} is truncated: the header needs {header} bytes, the file has {len(data)}")
    dims = struct.unpack(f">{ndim}I", data[4:header])
    dtype = np.dtype(IDX_DTYPES[code])
    count = math.prod(dims)
    expected = count * dtype.itemsize
    found = len(data) - header
    check(
        found >= expected,
        f"{source} is truncated: shape {tuple(dims)} needs {expected} data bytes, found {found}",
    )
    check(
        found == expected,
        f"{source} is corrupt: shape {tuple(dims)} needs {expected} data bytes, found {found} "
        f"({found - expected} extra)",
    )
    array = np.frombuffer(data, dtype=dtype, count=count, offset=header).reshape(dims)
    return array.astype(dtype.newbyteorder("="), copy=True)


def read_idx(path: Union[str, "os.PathLike[str]"]) -> np.ndarray:
    """Read an IDX file (gzipped or not) into a NumPy array."""
    return parse_idx(read_idx_bytes(path), str(path))
