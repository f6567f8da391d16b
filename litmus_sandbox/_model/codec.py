"""Encoding and decoding of single records (JSON, one record per line). Sans-io.

Reading is forgiving where the contract allows (unknown fields on stored records are
ignored) and strict where it matters: an unknown record kind or a newer ``v`` is a clear
"written by a newer version" error, a ``v`` below 1 or not an integer is invalid, and
unknown *provenance* keys are kept aside on the verdict so that the gate can fail closed
on them.

A record with a duplicate key (``"safe": true, "safe": false``) is malformed: msgspec
keeps the last value, so which one the writer meant is unknown. msgspec does not look for
duplicates, and looking costs a second parse, so a decoded record is first re-encoded:
when the bytes are the line itself (what this library writes), the line has no duplicate
(the encoder never writes one); only other lines get the second look
(:func:`duplicate_key`). :func:`canonical_block` does the same for a block of lines
decoded in one call.
"""

from __future__ import annotations

import functools
import gc
import hashlib
import json
import re
from collections.abc import Callable
from typing import Any, TypeVar

import msgspec

from litmus_sandbox._model.lossless import may_hold_bytes, written_form
from litmus_sandbox._model.records import (
    NEWEST_VERSION,
    EpisodeEnd,
    EpisodeHeader,
    LegacyProvenance,
    LegacyVerdict,
    MessageStep,
    PolicyRecord,
    Provenance,
    RecorderId,
    ToolCallStep,
    Verdict,
)

_S = TypeVar("_S", bound=msgspec.Struct)
R = TypeVar("R")

EpisodeRecord = EpisodeHeader | MessageStep | ToolCallStep | EpisodeEnd
VerdictRecord = Verdict | PolicyRecord | LegacyVerdict

_encoder = msgspec.json.Encoder()
_canonical = msgspec.json.Encoder(order="deterministic")


class _Envelope(msgspec.Struct):
    kind: Any = None
    type: Any = None
    v: Any = None


# Provenance structs forbid unknown keys so that the fast path notices them; these
# lenient twins read such records, whose unknown keys are then kept aside.
class _LenientRecorderId(
    RecorderId, frozen=True, kw_only=True, gc=False, forbid_unknown_fields=False
):
    pass


class _LenientProvenance(
    Provenance, frozen=True, kw_only=True, gc=False, forbid_unknown_fields=False
):
    recorder: _LenientRecorderId | None = None


class _LenientVerdict(
    Verdict, frozen=True, kw_only=True, tag="verdict", tag_field="kind", gc=False
):
    provenance: _LenientProvenance = _LenientProvenance()


class _LenientLegacyProvenance(
    LegacyProvenance, frozen=True, kw_only=True, gc=False, forbid_unknown_fields=False
):
    pass


class _LenientLegacyVerdict(LegacyVerdict, frozen=True, kw_only=True, gc=False):
    provenance: _LenientLegacyProvenance = _LenientLegacyProvenance()


def _as(cls: type[_S], obj: msgspec.Struct, **changes: Any) -> _S:
    """Copy ``obj`` into its public parent class ``cls``."""
    fields = {f: getattr(obj, f) for f in cls.__struct_fields__}
    fields.update(changes)
    return cls(**fields)


class DecodeProblem(ValueError):
    """A line could not be decoded; ``newer`` marks a newer-version record, ``torn`` a line
    that is the start of a JSON document cut short (a write interrupted by a crash)."""

    def __init__(self, message: str, *, newer: bool = False, torn: bool = False) -> None:
        super().__init__(message)
        self.newer = newer
        self.torn = torn


_envelope_decoder = msgspec.json.Decoder(_Envelope)
_episode_decoders: dict[tuple[str, str | None], msgspec.json.Decoder[Any]] = {
    ("episode", None): msgspec.json.Decoder(EpisodeHeader),
    ("end", None): msgspec.json.Decoder(EpisodeEnd),
    ("step", "message"): msgspec.json.Decoder(MessageStep),
    ("step", "tool_call"): msgspec.json.Decoder(ToolCallStep),
}
#: Fast path for whole verdict files (``decode_lines``) and single lines alike.
verdict_fast_decoder = msgspec.json.Decoder(Verdict | PolicyRecord)
legacy_fast_decoder = msgspec.json.Decoder(LegacyVerdict)
_verdict_lenient = msgspec.json.Decoder(_LenientVerdict)
_legacy_lenient = msgspec.json.Decoder(_LenientLegacyVerdict)
_raw_decoder = msgspec.json.Decoder()


def encode(record: msgspec.Struct) -> bytes:
    """One record as a JSON line (with the trailing newline), always valid UTF-8.

    Text holding lone surrogates and bytes are written as stand-ins, with the originals
    in ``meta["lossless"]`` (``lossless.py``); a record with neither (nearly all) is
    encoded once, as it is.

    Raises:
        TypeError: a value JSON cannot hold (and msgspec's other encoding errors).
    """
    try:
        line = _encoder.encode(record)
    except UnicodeEncodeError:
        line = _encoder.encode(written_form(record))
    else:
        if may_hold_bytes(record):
            line = _encoder.encode(written_form(record))
    return line + b"\n"


def as_written(record: _S) -> _S:
    """``record`` as a reader gets it back from the line :func:`encode` writes:
    ``record`` itself, or its stand-ins with the originals in ``meta["lossless"]``."""
    try:
        _encoder.encode(record)
    except UnicodeEncodeError:
        pass
    else:
        if not may_hold_bytes(record):
            return record
    return msgspec.convert(written_form(record), type=type(record))


def json_bytes(value: Any) -> bytes:
    """``value``'s JSON, for sizes and hashes.

    A value holding lone surrogates (which UTF-8 cannot encode) gets the same JSON text
    with each lone surrogate as its three bytes (``surrogatepass``): not UTF-8, so never
    written, but distinct for distinct values, as JSON is.
    """
    try:
        return _encoder.encode(value)
    except UnicodeEncodeError:
        return _surrogate_json(value, sort_keys=False)


def canonical_json(obj: Any) -> bytes:
    """Deterministic JSON (sorted keys) for content hashes and replay keys; lone
    surrogates as in :func:`json_bytes`."""
    try:
        return _canonical.encode(obj)
    except UnicodeEncodeError:
        return _surrogate_json(obj, sort_keys=True)


def _surrogate_json(value: Any, *, sort_keys: bool) -> bytes:
    text = json.dumps(
        msgspec.to_builtins(value, str_keys=True),
        ensure_ascii=False,
        separators=(",", ":"),
        sort_keys=sort_keys,
    )
    return text.encode("utf-8", "surrogatepass")


def content_hash(obj: Any) -> str:
    """sha256 hex digest of ``obj``'s canonical JSON."""
    return hashlib.sha256(canonical_json(obj)).hexdigest()


_MALFORMED_AT = re.compile(r"JSON is malformed: [a-z ]+ \(byte (\d+)\)")


def cut_short(line: bytes, exc: msgspec.DecodeError) -> bool:
    """Whether ``line``, which failed to decode with ``exc``, is the start of a JSON object
    whose end is missing (a write cut short by a crash).

    msgspec says "truncated" for most cuts, but a cut right after a number's ``.``, ``-``,
    ``e`` or ``e+`` is "invalid number" (or "invalid character") at the byte just past
    the end: an error found at the end of the input is a cut too.
    """
    if not line.lstrip().startswith(b"{"):
        return False
    message = str(exc)
    if message == "Input data was truncated":
        return True
    if "trailing characters" in message:
        return False  # a whole document, and more after it: never a cut
    m = _MALFORMED_AT.fullmatch(message)
    return m is not None and int(m.group(1)) >= len(line)


def _envelope(line: bytes) -> _Envelope:
    # ValidationError subclasses DecodeError: test for it first.
    try:
        return _envelope_decoder.decode(line)
    except msgspec.ValidationError:
        raise DecodeProblem("not a JSON object") from None
    except msgspec.DecodeError as exc:
        raise DecodeProblem(f"not valid JSON ({exc})", torn=cut_short(line, exc)) from None


def _check_version(env: _Envelope, what: str) -> None:
    if env.v is None:
        raise DecodeProblem(f"{what} record has no 'v' (schema version)")
    if not isinstance(env.v, int) or isinstance(env.v, bool):
        raise DecodeProblem(f"{what} record has a non-integer 'v': {env.v!r}")
    if env.v < 1:
        raise DecodeProblem(f"{what} record has an invalid 'v': {env.v} (versions start at 1)")
    if env.v > NEWEST_VERSION:
        raise DecodeProblem(
            f"{what} record has v={env.v}, written by a newer version of litmus-sandbox "
            f"(this one reads v<={NEWEST_VERSION}); upgrade litmus-sandbox",
            newer=True,
        )


def _shallow(decode: Callable[[bytes], R]) -> Callable[[bytes], R]:
    """``decode``, with JSON nested past the decoder's recursion limit, or JSON the
    envelope's look did not reject (invalid UTF-8 inside a string), a DecodeProblem."""

    @functools.wraps(decode)
    def checked(line: bytes) -> R:
        try:
            return decode(line)
        except RecursionError:
            raise DecodeProblem(_TOO_DEEP) from None
        except msgspec.ValidationError as exc:  # a decoder not guarded below
            raise DecodeProblem(f"invalid record: {exc}") from None
        except msgspec.DecodeError as exc:
            raise DecodeProblem(f"not valid JSON ({exc})", torn=cut_short(line, exc)) from None

    return checked


_TOO_DEEP = "JSON nested too deeply to decode"


class DuplicateKey(Exception):
    """Raised by :func:`unique_object` on a key found twice in one JSON object."""

    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def unique_object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """An ``object_pairs_hook`` for ``json.loads`` that refuses a duplicate key.

    Raises:
        DuplicateKey: names the key.
    """
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise DuplicateKey(key)
            seen.add(key)
    return out


def duplicate_key(line: bytes) -> str | None:
    """The first key found twice in one object of the JSON ``line``, or None.

    A second, slower parse (the stdlib's, which hands each object's pairs over); numbers
    are kept as text, so a huge integer costs nothing.

    Raises:
        DecodeProblem: ``line`` is nested too deeply to parse.
    """
    try:
        json.loads(line, object_pairs_hook=unique_object, parse_int=str, parse_float=str)
    except DuplicateKey as dup:
        return dup.key
    except RecursionError:
        raise DecodeProblem(_TOO_DEEP) from None
    except ValueError:
        return None  # msgspec read it; what the stdlib refuses holds no duplicate it sees
    return None


_NESTING = re.compile(rb'"(?:[^"\\]|\\.)*"|[\[\]{}]', re.DOTALL)


def too_deep(data: bytes, limit: int) -> bool:
    """Whether the JSON ``data`` nests arrays and objects deeper than ``limit`` (strings
    aside): counted in one pass, before any parser recurses into it."""
    depth = 0
    for m in _NESTING.finditer(data):
        tok = m.group()
        if tok in (b"[", b"{"):
            depth += 1
            if depth > limit:
                return True
        elif tok in (b"]", b"}"):
            depth -= 1
    return False


def _duplicate_problem(key: str) -> DecodeProblem:
    return DecodeProblem(f"duplicate key {key!r} in one object (which value is meant is ambiguous)")


def check_unique_keys(line: bytes, record: Any) -> None:
    """Raise if ``line`` (stripped), decoded as ``record``, has a duplicate key.

    Free for a line this library wrote: ``record`` re-encodes to the same bytes.

    Raises:
        DecodeProblem: a duplicate key (named), or a line too deep for the second look.
    """
    if _encoder.encode(record) == line:
        return
    if (key := duplicate_key(line)) is not None:
        raise _duplicate_problem(key)


_LEGACY_TAIL = b',"unknown_provenance":{}}\n'


def canonical_block(records: list[Any], block: bytes, *, legacy: bool = False) -> bool:
    """Whether ``block`` (whole lines) is what this library's encoder writes for the
    ``records`` decoded from it, spaces aside (``json.dumps`` writes ``", "`` and
    ``": "``): then no line of it has a duplicate key.

    ``legacy``: the records are legacy verdicts, whose writer has no
    ``unknown_provenance`` key (the fast decoder always leaves it empty).
    """
    out = _encoder.encode_lines(records)
    if out == block:
        return True
    if legacy:
        out = out.replace(_LEGACY_TAIL, b"}\n")
    # Deleting the spaces on both sides (any inside strings too) can merge two keys of
    # the block but never split one, and the encoder writes each key once: when the
    # results are equal, every object of the block has as many members as decoded.
    # The encoder writes no space outside strings: most often there is none to delete.
    if b" " in out:
        out = out.translate(None, b" ")
    return out == block.translate(None, b" ")


def block_duplicate(block: bytes, first_line: int) -> tuple[int, DecodeProblem] | None:
    """The first line of ``block`` with a duplicate key, and the problem, or None."""
    if _members_distinct(block):
        return None
    for offset, line in enumerate(block.split(b"\n")):
        if line.strip() and (key := duplicate_key(line)) is not None:
            return first_line + offset, _duplicate_problem(key)
    return None


def _members_distinct(block: bytes) -> bool:
    """Whether every object of ``block`` (whole lines) has as many members as distinct
    keys, told at C speed: the block's ``":`` count (whitespace dropped) against that of
    its untyped decoding re-encoded, which keeps one member per key. False when it cannot
    tell (an escaped quote makes ``":`` ambiguous): then each line gets the second look.
    """
    if b'\\"' in block:
        return False
    members = block.translate(None, b" \t\r").count(b'":')
    enabled = gc.isenabled()
    gc.disable()  # many small dicts, freed below: collections would only cost time
    try:
        decoded = _raw_decoder.decode_lines(block)
    except (msgspec.DecodeError, RecursionError):
        return False
    finally:
        if enabled:
            gc.enable()
    out = _encoder.encode_lines(decoded)
    return b'\\"' not in out and out.count(b'":') == members


def _decode_episode_record(line: bytes) -> EpisodeRecord:
    """Decode one episode-stream line. Raises :class:`DecodeProblem`."""
    env = _envelope(line)
    if env.kind is None:
        raise DecodeProblem("record has no 'kind' (expected episode, step or end)")
    if env.kind not in ("episode", "step", "end"):
        if env.kind in ("verdict", "policy"):
            raise DecodeProblem(
                f"a {env.kind!r} record in an episode stream (is this a verdict file?)"
            )
        if env.kind == "http":
            raise DecodeProblem(
                "an 'http' record in an episode stream (is this an egress cassette? "
                "HttpCassette.from_files reads those)"
            )
        raise DecodeProblem(
            f"unknown record kind {env.kind!r}; written by a newer version of litmus-sandbox?",
            newer=True,
        )
    _check_version(env, str(env.kind))
    sub: str | None = None
    if env.kind == "step":
        if env.type is None:
            raise DecodeProblem("step record has no 'type' (expected message or tool_call)")
        if env.type not in ("message", "tool_call"):
            raise DecodeProblem(
                f"unknown step type {env.type!r}; written by a newer version of litmus-sandbox?",
                newer=True,
            )
        sub = str(env.type)
    decoder = _episode_decoders[(str(env.kind), sub)]
    try:
        record: EpisodeRecord = decoder.decode(line)
    except msgspec.ValidationError as exc:
        raise DecodeProblem(f"invalid {sub or env.kind} record: {exc}") from None
    check_unique_keys(line, record)
    return record


def _unknown_keys(line: bytes, known: frozenset[str]) -> dict[str, Any]:
    """Provenance keys this version does not know, a nested one named by its dotted path
    (``recorder.build``)."""
    raw = _raw_decoder.decode(line)
    prov = raw.get("provenance") if isinstance(raw, dict) else None
    if not isinstance(prov, dict):
        return {}
    out = {k: v for k, v in prov.items() if k not in known}
    recorder = prov.get("recorder")
    if "recorder" in known and isinstance(recorder, dict):
        out.update({f"recorder.{k}": v for k, v in recorder.items() if k not in _RECORDER_FIELDS})
    return out


_PROVENANCE_FIELDS = frozenset(Provenance.__struct_fields__)
_RECORDER_FIELDS = frozenset(RecorderId.__struct_fields__)
_LEGACY_FIELDS = frozenset(LegacyProvenance.__struct_fields__)


def _decode_verdict_record(line: bytes) -> VerdictRecord:
    """Decode one verdict-stream line: a verdict, a policy record or a legacy verdict."""
    record = _decode_verdict_shape(line)
    check_unique_keys(line, record)
    return record


def _decode_verdict_shape(line: bytes) -> VerdictRecord:
    try:
        return verdict_fast_decoder.decode(line)
    except msgspec.ValidationError:
        pass  # not the common shape: find out what it is below
    except msgspec.DecodeError as exc:
        raise DecodeProblem(f"not valid JSON ({exc})", torn=cut_short(line, exc)) from None
    env = _envelope(line)
    if env.kind is None:
        return _decode_legacy(line)
    if env.kind not in ("verdict", "policy"):
        if env.kind in ("episode", "step", "end"):
            raise DecodeProblem(
                f"an {env.kind!r} record in a verdict stream (is this an episode file?)"
            )
        if env.kind == "http":
            raise DecodeProblem(
                "an 'http' record in a verdict stream (is this an egress cassette?)"
            )
        raise DecodeProblem(
            f"unknown record kind {env.kind!r}; written by a newer version of litmus-sandbox?",
            newer=True,
        )
    _check_version(env, str(env.kind))
    if env.kind == "policy":
        try:
            return msgspec.json.decode(line, type=PolicyRecord)
        except msgspec.ValidationError as exc:
            raise DecodeProblem(f"invalid policy record: {exc}") from None
    try:
        lenient = _verdict_lenient.decode(line)
    except msgspec.ValidationError as exc:
        raise DecodeProblem(f"invalid verdict record: {exc}") from None
    return _as(
        Verdict,
        lenient,
        provenance=_as(
            Provenance,
            lenient.provenance,
            recorder=_as(RecorderId, r) if (r := lenient.provenance.recorder) else None,
        ),
        unknown_provenance=_unknown_keys(line, _PROVENANCE_FIELDS),
    )


def _decode_legacy(line: bytes) -> LegacyVerdict:
    try:
        return legacy_fast_decoder.decode(line)
    except msgspec.ValidationError:
        pass
    try:
        legacy = _legacy_lenient.decode(line)
    except msgspec.ValidationError as exc:
        raise DecodeProblem(
            f"record has no 'kind' and is not a legacy verdict (run_id, safe, provenance): {exc}"
        ) from None
    extra = _unknown_keys(line, _LEGACY_FIELDS)
    if extra:
        legacy = msgspec.structs.replace(legacy, unknown_provenance=extra)
    return legacy


#: Decode one episode-stream line. Raises :class:`DecodeProblem` (never a bare decoder error).
decode_episode_record = _shallow(_decode_episode_record)
#: Decode one verdict-stream line: a verdict, a policy record or a legacy verdict.
#: Raises :class:`DecodeProblem` (never a bare decoder error).
decode_verdict_record = _shallow(_decode_verdict_record)
