"""Regenerate the index blobs (``qo_indptr``, ``kv_indptr``, ``kv_indices``) of the workloads.

The official blobs live only in the FlashInfer-Trace dataset on HuggingFace. These stand in for
them: per-sequence ``(q_len, kv_len)`` come from ``blob/workload_lengths.json`` (exact for the
single-sequence workloads, synthetic splits for the others), the indptrs are their prefix sums, and
``kv_indices`` are distinct pages drawn from ``[0, num_pages)`` with a seed derived from the uuid,
with the last page ``num_pages - 1`` always among them so the cache's end is read. The output is
byte-for-byte reproducible (``mla-prefill blobs --verify`` checks the committed files).

The same module writes the small CPU trace set under ``small/``.
"""

import json
import random
import shutil
import uuid as uuidlib
import zlib
from pathlib import Path
from typing import Dict, List, Sequence, Tuple

import torch

from mla_prefill.io import (
    DEFINITION_NAME,
    OP_TYPE,
    definition_path,
    load_workloads,
    workloads_path,
)

LENGTHS_FILE = "blob/workload_lengths.json"
SMALL_NUM_PAGES = 640
SMALL_SM_SCALE = 0.1352337747812271  # 1/sqrt(128 + 64), as in the upstream workloads

# name -> [(q_len, kv_len), ...]; tiny, for the CPU interpreter (the const axes are fixed, so only
# the token counts and KV lengths vary).
SMALL_CASES: Dict[str, List[Tuple[int, int]]] = {
    "single_prefill": [(7, 7)],
    "single_with_prefix": [(5, 37)],
    "decode_long_prefix": [(1, 300)],
    "decode_batch": [(1, 45), (1, 3), (1, 130), (1, 1)],
    "mixed_with_empty": [(3, 3), (0, 5), (4, 0), (0, 0), (9, 70), (2, 18)],
    "unaligned_multi": [(17, 17), (13, 29), (1, 64), (31, 95)],
    "few_hundred_tokens": [(200, 230)],
}


def seed_for(uuid: str) -> int:
    return zlib.crc32(uuid.encode())


def build_index_tensors(
    lengths: Sequence[Tuple[int, int]], num_pages: int, seed: int
) -> Dict[str, torch.Tensor]:
    """Indptrs from ``lengths``; distinct random pages (the last page included) for the KV ranges."""
    qo, kv = [0], [0]
    for q_len, kv_len in lengths:
        qo.append(qo[-1] + q_len)
        kv.append(kv[-1] + kv_len)
    n = kv[-1]
    if n > num_pages:
        raise ValueError(f"{n} KV positions need at least {n} pages, have {num_pages}")
    pages = random.Random(seed).sample(range(num_pages - 1), max(n - 1, 0)) if n else []
    if n:
        pages.insert(random.Random(seed + 1).randrange(n), num_pages - 1)
    return {
        "qo_indptr": torch.tensor(qo, dtype=torch.int32),
        "kv_indptr": torch.tensor(kv, dtype=torch.int32),
        "kv_indices": torch.tensor(pages, dtype=torch.int32),
    }


def _blob_bytes(tensors: Dict[str, torch.Tensor]) -> bytes:
    import safetensors.torch as st

    return st.save({k: v.contiguous() for k, v in tensors.items()})


def upstream_blobs(root: Path) -> Dict[Path, bytes]:
    """The blob files of ``workloads/`` as bytes, keyed by their path under ``root``."""
    with open(root / LENGTHS_FILE) as f:
        lengths = json.load(f)
    out: Dict[Path, bytes] = {}
    for wl in load_workloads(root):
        w = wl.workload
        paths = {s["path"] for s in w["inputs"].values() if s.get("type") == "safetensors"}
        if len(paths) != 1:
            raise ValueError(
                f"{wl.where}: expected one blob file for the index tensors, got {paths}"
            )
        if w["uuid"] not in lengths:
            raise KeyError(f"{wl.where}: no lengths for this uuid in {LENGTHS_FILE}")
        tensors = build_index_tensors(
            lengths[w["uuid"]], w["axes"]["num_pages"], seed_for(w["uuid"])
        )
        out[root / paths.pop()] = _blob_bytes(tensors)
    return out


def small_set() -> Tuple[List[dict], Dict[Path, bytes]]:
    """Workload records and blob bytes of the small CPU trace set."""
    records, blobs = [], {}
    blob_dir = f"blob/workloads/{OP_TYPE}/{DEFINITION_NAME}"
    for name, lengths in SMALL_CASES.items():
        uuid = str(uuidlib.uuid5(uuidlib.NAMESPACE_URL, f"mla-prefill/small/{name}"))
        tensors = build_index_tensors(lengths, SMALL_NUM_PAGES, seed_for(uuid))
        rel = f"./{blob_dir}/small_{name}.safetensors"
        blobs[Path(rel)] = _blob_bytes(tensors)
        index_spec = {k: {"type": "safetensors", "path": rel, "tensor_key": k} for k in tensors}
        records.append(
            {
                "definition": DEFINITION_NAME,
                "solution": None,
                "workload": {
                    "axes": {
                        "total_q": int(tensors["qo_indptr"][-1]),
                        "num_pages": SMALL_NUM_PAGES,
                        "len_indptr": len(lengths) + 1,
                        "num_kv_indices": int(tensors["kv_indptr"][-1]),
                    },
                    "inputs": {
                        "q_nope": {"type": "random"},
                        "q_pe": {"type": "random"},
                        "ckv_cache": {"type": "random"},
                        "kpe_cache": {"type": "random"},
                        "sm_scale": {"type": "scalar", "value": SMALL_SM_SCALE},
                        **index_spec,
                    },
                    "uuid": uuid,
                },
                "evaluation": None,
            }
        )
    return records, blobs


def write_all(root: Path) -> List[Path]:
    """Write the upstream blobs and the whole small trace set of the checkout ``root``; return
    the files written."""
    written = []
    for path, data in upstream_blobs(root).items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        written.append(path)
    small = root / "small"
    records, blobs = small_set()
    for rel, data in blobs.items():
        path = small / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        written.append(path)
    definition_path(small).parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(definition_path(root), definition_path(small))
    wpath = workloads_path(small)
    wpath.parent.mkdir(parents=True, exist_ok=True)
    wpath.write_text("".join(json.dumps(r) + "\n" for r in records))
    written += [definition_path(small), wpath]
    return written


def verify_all(root: Path) -> List[str]:
    """Files of the checkout ``root`` whose bytes differ from a fresh regeneration (empty list:
    all match)."""
    stale = []
    expected = dict(upstream_blobs(root))
    records, blobs = small_set()
    small = root / "small"
    expected.update({small / rel: data for rel, data in blobs.items()})
    expected[workloads_path(small)] = "".join(json.dumps(r) + "\n" for r in records).encode()
    expected[definition_path(small)] = definition_path(root).read_bytes()
    for path, data in expected.items():
        if not path.exists() or path.read_bytes() != data:
            stale.append(str(path))
    return stale
