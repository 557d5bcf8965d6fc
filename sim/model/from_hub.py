"""A Hugging Face model id (`owner/name`, optionally `owner/name@revision`) -> its config.json and safetensors headers.

No weights are read: config.json (and model.safetensors.index.json, when the repo has one) come through
huggingface_hub's own file cache; each safetensors header is read with two exact range requests (the 8-byte length,
then the header) and kept in a small JSON cache under the Hub cache (`$HF_HUB_CACHE/offloadsim-headers/`), keyed by
repo and revision, so a later resolve works offline (`HF_HUB_OFFLINE=1`, or the Hub unreachable). The endpoint
(`HF_ENDPOINT`), cache (`HF_HUB_CACHE`, `HF_HOME`) and offline switch are read when a model is resolved.
huggingface_hub is imported only here, inside the functions, so commands that take no model never load it.
Raises InputError, one sentence, for a malformed id, an unreachable Hub, a gated or private repo, a missing revision or
config.json, and a damaged header.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

from hwmodels.files import MAX_HEADER_BYTES, load_json, write_atomic
from hwmodels.units import InputError

NAME_RE = re.compile(r"^[A-Za-z0-9](?:[\w.-]{0,94}[A-Za-z0-9_])?$")  # the Hub's owner and repo names
REVISION_RE = re.compile(r"^[\w.-]+(?:/[\w.-]+)*$")
MAX_REVISION_CHARS = 255
FILE_SUFFIXES = (".json", ".gguf", ".safetensors", ".bin", ".pt", ".pth")
INDEX_FILE = "model.safetensors.index.json"
MAX_CACHE_BYTES = 64 * 2**20  # the header cache as a whole; the oldest entries go first
TIMEOUT_S = 10.0
LOGIN = "log in with 'huggingface-cli login' or set HF_TOKEN"
REACH_FIX = "connect, set HF_ENDPOINT, or give a config.json path"


@dataclass(frozen=True)
class HubCheckpoint:
    """What a Hub repo says about a model: config.json (parsed) and each safetensors file's header.

    `headers` maps a file name to (data bytes after the header, header without `__metadata__`); it is empty when the
    repo holds no safetensors files."""
    repo_id: str
    revision: str
    commit: str
    config: dict
    headers: dict


def is_hub_id(spec: str) -> bool:
    """True when `spec`, not an existing path, reads as `owner/name[@revision]` rather than as a file path."""
    if "/" not in spec or spec.startswith(("/", ".", "~")) or "\\" in spec:
        return False
    try:
        if Path(spec).exists():
            return False
    except OSError:  # a name too long for a path is no path
        pass
    return not spec.split("@", 1)[0].lower().endswith(FILE_SUFFIXES)


def parse_hub_id(spec: str) -> tuple[str, str]:
    """(`owner/name`, revision) of an id, checked before any network; the revision defaults to `main`."""
    repo, _, revision = spec.partition("@")
    parts = repo.split("/")
    bad = f"model: {spec[:80]!r}{'...' if len(spec) > 80 else ''} is neither an existing path nor a Hugging Face id"
    if len(spec) > 2 * 96 + 1 + MAX_REVISION_CHARS + 1 or len(parts) != 2:
        raise InputError(f"{bad} (owner/name, optionally @revision); check the path or the id.")
    if not all(NAME_RE.match(p) and ".." not in p and "--" not in p for p in parts) or repo.endswith(".git"):
        raise InputError(f"{bad}: owner and name are 1-96 letters, digits, '-', '_' or '.'; check the path or the id.")
    if "@" in spec and (not REVISION_RE.match(revision) or ".." in revision or len(revision) > MAX_REVISION_CHARS):
        raise InputError(f"{bad}: the revision after '@' must be a branch, tag or commit; check the id.")
    return repo, revision or "main"


def hub_checkpoint(spec: str) -> HubCheckpoint:
    """The config and safetensors headers of a Hub id, from the Hub or, offline or unreachable, from the caches."""
    repo, revision = parse_hub_id(spec)
    try:
        import huggingface_hub  # noqa: F401
    except ImportError:
        raise InputError(f"model: reading {repo!r} from the Hugging Face Hub needs huggingface_hub; install it "
                         "(pip install huggingface_hub) or give a config.json path.") from None
    cache = _cache_file(repo, revision)
    if _offline():
        return _from_cache(repo, revision, cache, "HF_HUB_OFFLINE is set")
    try:
        return _from_hub(repo, revision, cache)
    except _Unreachable as exc:
        return _from_cache(repo, revision, cache, str(exc))


class _Unreachable(Exception):
    """The Hub could not be asked (network, server or offline mode); the message says why."""


def _offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


def _endpoint() -> str:
    from huggingface_hub import constants
    return (os.environ.get("HF_ENDPOINT") or constants.ENDPOINT).rstrip("/")


def _hub_cache() -> Path:
    from huggingface_hub import constants
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"])
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]) / "hub"
    return Path(constants.HF_HUB_CACHE)


def _cache_file(repo: str, revision: str) -> Path:
    digest = hashlib.sha256(f"{repo}@{revision}".encode()).hexdigest()[:16]
    return _hub_cache() / "offloadsim-headers" / f"{repo.replace('/', '--')}--{digest}.json"


def _from_hub(repo: str, revision: str, cache: Path) -> HubCheckpoint:
    from huggingface_hub import HfApi
    info = _ask(repo, revision, lambda: HfApi(endpoint=_endpoint()).model_info(
        repo, revision=revision, files_metadata=True, timeout=TIMEOUT_S))
    commit = info.sha
    if not isinstance(commit, str) or not re.fullmatch(r"[0-9a-f]{40}", commit):
        raise _Unreachable(f"the Hub's answer names no commit for revision {revision!r}")
    sizes = {s.rfilename: s.size for s in info.siblings or ()}
    config = _config(repo, revision, commit, local=False)
    files = _safetensors_files(repo, revision, commit, sizes)
    cached = _read_cache(cache, repo, revision)
    if cached and cached["commit"] == commit and sorted(cached["files"]) == files:
        headers = cached["files"]
    else:
        headers = {f: _read_header(repo, revision, commit, f, sizes.get(f)) for f in files}
        _write_cache(cache, {"repo": repo, "revision": revision, "commit": commit, "files": headers})
    return HubCheckpoint(repo, revision, commit, config,
                         {f: (h["data_bytes"], h["header"]) for f, h in headers.items()})


def _from_cache(repo: str, revision: str, cache: Path, why: str) -> HubCheckpoint:
    cached = _read_cache(cache, repo, revision)
    if cached is None:
        fix = "unset HF_HUB_OFFLINE" if _offline() else REACH_FIX
        name = repo if revision == "main" else f"{repo}@{revision}"
        raise InputError(f"model: cannot reach the Hugging Face Hub for {name!r} ({why}) and it is not in the cache; "
                         f"{fix}.")
    try:
        config = _config(repo, revision, cached["commit"], local=True)
    except _Unreachable:  # the header cache holds it but huggingface_hub's file cache lost its config.json
        raise InputError(f"model: cannot reach the Hugging Face Hub for {repo!r} ({why}) and its config.json is not in "
                         f"the cache; {REACH_FIX}.") from None
    headers = {f: (h["data_bytes"], h["header"]) for f, h in cached["files"].items()}
    return HubCheckpoint(repo, revision, cached["commit"], config, headers)


def _network_errors() -> tuple:
    """What a failed request raises: huggingface_hub's offline switch, OS errors, its HTTP client's transport errors."""
    import importlib
    from huggingface_hub import errors
    from huggingface_hub.utils import get_session
    client = importlib.import_module(type(get_session()).__module__.split(".")[0])  # httpx or httpx2
    return errors.OfflineModeIsEnabled, OSError, getattr(client, "TransportError", OSError)


def _ask(repo: str, revision: str, call):
    """`call()`, with the Hub's refusals turned into one sentence and network failures into _Unreachable."""
    from huggingface_hub import errors
    try:
        return call()
    except errors.GatedRepoError:
        raise InputError(f"model: {repo!r} is a gated repo on the Hugging Face Hub; accept its terms on the model "
                         f"page, then {LOGIN}.") from None
    except errors.RepositoryNotFoundError as exc:
        if exc.response is not None and exc.response.status_code in (401, 403):
            raise InputError(f"model: the Hugging Face Hub refused {repo!r} ({exc.response.status_code}): it is "
                             f"private, gated or not there; {LOGIN}, and check the id.") from None
        raise InputError(f"model: {repo!r} is neither an existing path nor a model on the Hugging Face Hub; check "
                         "the id or the path.") from None
    except errors.RevisionNotFoundError:
        raise InputError(f"model: revision {revision!r} of {repo!r} is not on the Hugging Face Hub; give a branch, "
                         "tag or commit that exists.") from None
    except errors.LocalEntryNotFoundError as exc:  # offline or unreachable, and not in the file cache
        raise _Unreachable(f"{type(exc).__name__}: not in the cache") from None
    except errors.EntryNotFoundError:
        raise InputError(f"model: {repo!r} has no config.json on the Hugging Face Hub (a GGUF-only repo?); give the "
                         "path of a downloaded .gguf file or of a config.json.") from None
    except errors.HfHubHTTPError as exc:
        code = exc.response.status_code if exc.response is not None else None
        if code in (401, 403):
            raise InputError(f"model: the Hugging Face Hub refused {repo!r} ({code}); {LOGIN}.") from None
        raise _Unreachable(f"HTTP {code}") from None
    except _network_errors() as exc:
        raise _Unreachable(f"{type(exc).__name__}: {' '.join(str(exc).split())[:80]}") from None


def _config(repo: str, revision: str, commit: str, local: bool) -> dict:
    """config.json of the commit through huggingface_hub's cache; `_name_or_path` set to the id."""
    path = _download(repo, revision, commit, "config.json", local)
    cfg = load_json(path, f"model: {repo}'s config.json", fix="report it to the repo's owner or give a config.json")
    if not isinstance(cfg, dict):
        raise InputError(f"model: {repo}'s config.json is not a JSON object; give a config.json path.")
    cfg["_name_or_path"] = repo
    return cfg


def _download(repo: str, revision: str, commit: str, filename: str, local: bool) -> Path:
    from huggingface_hub import hf_hub_download
    return Path(_ask(repo, revision, lambda: hf_hub_download(
        repo, filename, revision=commit, endpoint=_endpoint(), cache_dir=_hub_cache(), local_files_only=local,
        etag_timeout=TIMEOUT_S)))


def _safetensors_files(repo: str, revision: str, commit: str, sizes: dict) -> list[str]:
    """The shards the index names, or else the top-level *.safetensors files."""
    if INDEX_FILE in sizes:
        index = load_json(_download(repo, revision, commit, INDEX_FILE, False), f"model: {repo}'s {INDEX_FILE}",
                          max_bytes=MAX_HEADER_BYTES, fix="report it to the repo's owner or give a config.json")
        shards = index.get("weight_map") if isinstance(index, dict) else None
        if not isinstance(shards, dict) or not all(isinstance(v, str) and v in sizes for v in shards.values()):
            raise InputError(f"model: {repo}'s {INDEX_FILE} names files the repo does not hold; report it to the "
                             "repo's owner or give a config.json path.")
        return sorted(set(shards.values()))
    return sorted(f for f in sizes if f.endswith(".safetensors") and "/" not in f)


def _read_header(repo: str, revision: str, commit: str, filename: str, size: int | None) -> dict:
    """One file's header, by two range requests that ask for the header bytes only."""
    from huggingface_hub import hf_hub_url
    url = hf_hub_url(repo, filename, revision=commit, endpoint=_endpoint())
    where = f"model: {repo}'s {filename}"
    n = int.from_bytes(_ask(repo, revision, lambda: _range(url, 0, 8)), "little")
    if n > MAX_HEADER_BYTES or (size is not None and 8 + n > size):
        raise InputError(f"{where} claims a {n:,}-byte header in a {size or 0:,}-byte file; report it to the repo's "
                         "owner or give a config.json path.")
    raw = _ask(repo, revision, lambda: _range(url, 8, n))
    try:
        header = json.loads(raw.decode("utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError):
        header = None
    if not isinstance(header, dict):
        raise InputError(f"{where} has an unreadable header; report it to the repo's owner or give a config.json path.")
    header.pop("__metadata__", None)
    ends = [e["data_offsets"][1] for e in header.values() if isinstance(e, dict)
            and isinstance(e.get("data_offsets"), list) and len(e["data_offsets"]) == 2
            and isinstance(e["data_offsets"][1], int)]
    return {"data_bytes": size - 8 - n if size is not None else max(ends, default=0), "header": header}


def _range(url: str, start: int, length: int) -> bytes:
    """Exactly bytes start..start+length-1 of `url`; a server that ignores Range is read no further than that."""
    from huggingface_hub.utils import build_hf_headers, get_session, hf_raise_for_status
    headers = {**build_hf_headers(), "Range": f"bytes={start}-{start + length - 1}", "Accept-Encoding": "identity"}
    with get_session().stream("GET", url, headers=headers, timeout=TIMEOUT_S) as response:
        if response.status_code >= 400:
            response.read()
            hf_raise_for_status(response)
        skip = start if response.status_code == 200 else 0  # the whole file: skip to `start`
        out = bytearray()
        for chunk in response.iter_bytes():
            out += chunk
            if len(out) >= skip + length:
                break
    data = bytes(out[skip:skip + length])
    if len(data) != length:
        raise _Unreachable(f"{url} ended after {len(data)} of {length} header bytes")
    return data


def _read_cache(path: Path, repo: str, revision: str) -> dict | None:
    """A cache entry for this repo and revision, or None when there is none or it is not one of ours."""
    if not path.is_file():
        return None
    try:
        entry = load_json(path, "model: header cache", max_bytes=MAX_CACHE_BYTES)
    except InputError:
        return None
    ok = isinstance(entry, dict) and entry.get("repo") == repo and entry.get("revision") == revision \
        and isinstance(entry.get("commit"), str) and isinstance(entry.get("files"), dict) \
        and all(isinstance(h, dict) and isinstance(h.get("data_bytes"), int) and isinstance(h.get("header"), dict)
                for h in entry["files"].values())
    return entry if ok else None


def _write_cache(path: Path, entry: dict) -> None:
    """Write one entry atomically, then drop the oldest entries past MAX_CACHE_BYTES; a cache that cannot be
    written is skipped (the next resolve asks the Hub again)."""
    text = json.dumps(entry, separators=(",", ":"))
    if len(text) > MAX_CACHE_BYTES:
        return
    try:
        write_atomic(path, text)
        entries = sorted(path.parent.glob("*.json"), key=lambda p: p.stat().st_mtime, reverse=True)
        total = 0
        for p in entries:
            total += p.stat().st_size
            if total > MAX_CACHE_BYTES and p != path:
                p.unlink(missing_ok=True)
    except OSError:
        pass
