"""The ``sessions`` of a resumable output: one entry per invocation that worked on it.

A certification, a targets computation or a training run continued after a kill, across days and
code changes, records where each invocation began, when, and with which code and settings, so the
file says which code made which part of it.  Each command names its own "where" (examples or
blocks done, epoch and step) and the fields it copies from its metadata.
"""
from __future__ import annotations

import datetime
from typing import Any, Dict, List, Mapping, Optional, Sequence

#: the one entry an output written before sessions were recorded gets
LEGACY_NOTE = "every invocation before sessions were recorded; the code and settings of the last"


def past_sessions(old: Optional[Mapping[str, Any]], start: Dict[str, Any], fields: Sequence[str]) -> List[dict]:
    """The ``sessions`` that the metadata ``old`` records (none for a new output).  Metadata of an
    earlier rsmooth gives one entry: its ``started``, ``start`` (where a run begins) and its
    ``fields``, which are its last invocation's."""
    if old is None:
        return []
    if isinstance(old.get("sessions"), list):
        return list(old["sessions"])
    return [{"began": old.get("started"), **start, **{k: old.get(k) for k in fields}, "note": LEGACY_NOTE}]


def session(where: Dict[str, Any], values: Dict[str, Any]) -> dict:
    """This invocation's entry: the time now, where it begins (``where``) and its ``values``."""
    return {"began": datetime.datetime.now().isoformat(timespec="seconds"), **where, **values}


def shard_sessions(shards: Sequence[tuple]) -> List[dict]:
    """The merged output's ``sessions``: every shard's (``(path, metadata)`` pairs), each entry
    naming its shard; first, once each, the entries of the one-process run the shards continued
    (marked ``"from"``, copied into every shard it started)."""
    entries = [(meta["shard"], e) for _, meta in shards for e in meta.get("sessions") or []]
    before: List[dict] = []
    for _, e in entries:
        if "from" in e and e not in before:
            before.append(e)
    return before + [{"shard": s, **e} for s, e in entries if "from" not in e]
