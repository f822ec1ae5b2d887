"""Policy artifacts: a gear's folder (model files with their sidecars, a Cwnd Table with its
sidecar, a classifier) packed as one deterministic tar, its sha256 the artifact's identity.

Rules for a push (docs/control.md, "Policy registry"):
- the folder holds at least one sidecar, `NAME.meta.json` (docs/models.md, "Sidecar"), beside the
  file it describes (`NAME.json` or `NAME.toml`);
- every sidecar is a JSON object with `training_data.sha256` (64 lowercase hex digits): the digest
  of the data the artifact was trained on, recorded with the version;
- a training data file that travels in the folder (the sidecar's `training_data.file`) must have
  that digest;
- the uploader states the artifact's sha256 and the registry recomputes it.
Anything else is refused with the file and field named.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import tarfile
from dataclasses import dataclass
from pathlib import Path

SIDECAR_SUFFIX = ".meta.json"
ARTIFACT_SUFFIXES = (".json", ".toml")
MAX_FILES = 256
_HEX64 = re.compile(r"^[0-9a-f]{64}$")


class PolicyError(Exception):
    """An artifact refused, with the reason (file and field)."""


@dataclass(frozen=True)
class Artifact:
    data: bytes
    sha256: str
    files: dict[str, bytes]
    training_digests: dict[str, str]  # sidecar name -> training_data.sha256

    @property
    def training_digest(self) -> str:
        return ",".join(sorted(set(self.training_digests.values())))

    def manifest(self) -> dict:
        return {
            "files": {n: hashlib.sha256(b).hexdigest() for n, b in sorted(self.files.items())},
            "training_data": dict(sorted(self.training_digests.items())),
        }


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def pack(directory: Path) -> bytes:
    """The folder's regular files as an uncompressed tar: sorted names, no times, owners or modes,
    so the same files always give the same bytes (and sha256)."""
    directory = Path(directory)
    if not directory.is_dir():
        raise PolicyError(f"{directory}: not a folder")
    names = sorted(str(p.relative_to(directory)) for p in directory.rglob("*") if p.is_file())
    if not names:
        raise PolicyError(f"{directory}: no files")
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name in names:
            data = (directory / name).read_bytes()
            info = tarfile.TarInfo(name)
            info.size, info.mtime, info.mode = len(data), 0, 0o644
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def unpack_files(data: bytes) -> dict[str, bytes]:
    """The files of a packed artifact; refuses links, absolute paths and `..`."""
    files: dict[str, bytes] = {}
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tar:
            for info in tar:
                if len(files) >= MAX_FILES:
                    raise PolicyError(f"more than {MAX_FILES} files")
                name = info.name
                if not info.isfile() or name.startswith("/") or ".." in Path(name).parts:
                    raise PolicyError(f"{name}: only plain files with relative names are allowed")
                f = tar.extractfile(info)
                files[name] = f.read() if f else b""
    except (tarfile.TarError, EOFError) as e:
        raise PolicyError(f"not a tar archive: {e}") from e
    if not files:
        raise PolicyError("the artifact holds no files")
    return files


def check(data: bytes, stated_sha256: str | None = None) -> Artifact:
    """Validates a packed artifact (the rules above); returns it with its digests."""
    digest = sha256_bytes(data)
    if stated_sha256 is not None and stated_sha256 != digest:
        raise PolicyError(f"sha256 mismatch: the upload says {stated_sha256}, its bytes hash to {digest}")
    files = unpack_files(data)
    sidecars = sorted(n for n in files if n.endswith(SIDECAR_SUFFIX))
    if not sidecars:
        raise PolicyError(
            f"no sidecar: a policy needs NAME{SIDECAR_SUFFIX} (docs/models.md, 'Sidecar') beside its "
            f"file; found {', '.join(sorted(files))}"
        )
    digests: dict[str, str] = {}
    for name in sidecars:
        try:
            meta = json.loads(files[name])
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise PolicyError(f"{name}: not JSON ({e})") from e
        stem = name[: -len(SIDECAR_SUFFIX)]
        if not any(stem + s in files for s in ARTIFACT_SUFFIXES):
            raise PolicyError(f"{name}: no {stem}.json or {stem}.toml beside it for it to describe")
        td = meta.get("training_data") if isinstance(meta, dict) else None
        sha = td.get("sha256") if isinstance(td, dict) else None
        if not isinstance(sha, str) or not _HEX64.match(sha):
            raise PolicyError(f"{name}: training_data.sha256 must be 64 lowercase hex digits, found {sha!r}")
        train_file = td.get("file")
        if isinstance(train_file, str):
            candidate = str(Path(name).parent / train_file) if "/" in name else train_file
            if candidate in files and sha256_bytes(files[candidate]) != sha:
                raise PolicyError(
                    f"{name}: training data digest mismatch: {candidate} hashes to "
                    f"{sha256_bytes(files[candidate])}, the sidecar records {sha}"
                )
        digests[name] = sha
    return Artifact(data=data, sha256=digest, files=files, training_digests=digests)


def check_training_data(artifact: Artifact, path: Path) -> None:
    """Refuses an artifact whose sidecars do not record `path`'s digest (`policy push --training-data`)."""
    actual = hashlib.sha256(Path(path).read_bytes()).hexdigest()
    wrong = {n: d for n, d in artifact.training_digests.items() if d != actual}
    if wrong:
        name, recorded = next(iter(wrong.items()))
        raise PolicyError(f"training data digest mismatch: {path} hashes to {actual}, {name} records {recorded}")


def install(data: bytes, expected_sha256: str, root: Path, name: str) -> Path:
    """Writes the artifact's files under `root/name` beside what is there, checked first: the
    sha256 must match and the archive must unpack; returns the folder. Nothing in `root` changes
    when it fails."""
    digest = sha256_bytes(data)
    if digest != expected_sha256:
        raise PolicyError(f"sha256 mismatch: expected {expected_sha256}, the download hashes to {digest}")
    files = unpack_files(data)
    target = root / name
    tmp = root / (name + ".partial")
    if tmp.exists():
        _rmtree(tmp)
    for rel, content in files.items():
        path = tmp / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)
    if target.exists():
        _rmtree(target)
    os.replace(tmp, target)
    return target


def _rmtree(path: Path) -> None:
    import shutil

    shutil.rmtree(path)
