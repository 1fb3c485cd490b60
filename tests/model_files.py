"""Real model files for the source tests: safetensors written by the `safetensors` library,
GGUF written by the `gguf` package, a fake Hugging Face cache folder, and a fake Hub served on
loopback (HF_ENDPOINT) with HTTP Range support. Tiny tensors; nothing touches the network."""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import numpy as np

TINY = {
    "model_type": "llama",
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 256,
    "max_position_embeddings": 2048,
    "torch_dtype": "bfloat16",
}


def llama_shapes(cfg: dict[str, Any]) -> dict[str, tuple[int, ...]]:
    """Parameter names and shapes of a Llama decoder, as transformers names them."""
    h, i, v = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    d = h // cfg["num_attention_heads"]
    kv = cfg["num_key_value_heads"] * d
    shapes: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (v, h)}
    for layer in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{layer}."
        shapes |= {
            p + "self_attn.q_proj.weight": (h, h),
            p + "self_attn.k_proj.weight": (kv, h),
            p + "self_attn.v_proj.weight": (kv, h),
            p + "self_attn.o_proj.weight": (h, h),
            p + "mlp.gate_proj.weight": (i, h),
            p + "mlp.up_proj.weight": (i, h),
            p + "mlp.down_proj.weight": (h, i),
            p + "input_layernorm.weight": (h,),
            p + "post_attention_layernorm.weight": (h,),
        }
    shapes["model.norm.weight"] = (h,)
    if not cfg.get("tie_word_embeddings"):
        shapes["lm_head.weight"] = (v, h)
    return shapes


def save(path: Path, tensors: dict[str, Any]) -> int:
    """Write tensors with the safetensors library; return the bytes of tensor data written."""
    from safetensors.torch import save_file

    path.parent.mkdir(parents=True, exist_ok=True)
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(path))
    return sum(t.numel() * t.element_size() for t in tensors.values())


def write_checkpoint(
    folder: Path,
    cfg: dict[str, Any] | None = None,
    dtype: str = "bfloat16",
    shards: int = 1,
    extra: dict[str, Any] | None = None,
) -> int:
    """A model folder: config.json and the weights (sharded with an index when shards > 1)."""
    import torch

    cfg = dict(cfg or TINY)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(cfg))
    tdtype = getattr(torch, dtype)
    tensors = {k: torch.zeros(s, dtype=tdtype) for k, s in llama_shapes(cfg).items()}
    tensors |= extra or {}
    names = list(tensors)
    if shards == 1:
        return save(folder / "model.safetensors", tensors)
    written, weight_map = 0, {}
    for s in range(shards):
        part = names[s::shards]
        fname = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
        written += save(folder / fname, {k: tensors[k] for k in part})
        weight_map |= {k: fname for k in part}
    index = {"metadata": {"total_size": written}, "weight_map": weight_map}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    return written


def fake_cache(
    root: Path, repo_id: str, source: Path, commit: str = "a" * 40, ref: str = "main"
) -> Path:
    """A Hugging Face cache entry: blobs, snapshots/<commit>/ links, refs/<ref> (the layout
    huggingface_hub writes)."""
    repo = root / f"models--{repo_id.replace('/', '--')}"
    snap = repo / "snapshots" / commit
    snap.mkdir(parents=True, exist_ok=True)
    (repo / "blobs").mkdir(exist_ok=True)
    (repo / "refs").mkdir(exist_ok=True)
    (repo / "refs" / ref).write_text(commit)
    for f in source.iterdir():
        blob = repo / "blobs" / f"{abs(hash(f.read_bytes())):x}"
        blob.write_bytes(f.read_bytes())
        (snap / f.name).symlink_to(blob)
    return snap


# --------------------------------------------------------------------------------------
# A fake Hub on loopback
# --------------------------------------------------------------------------------------


class FakeHub:
    """Serves folders as Hub repositories: the model-info API and resolve/ with Range."""

    def __init__(self, repos: dict[str, Path], commit: str = "c" * 40, token: str | None = None):
        self.repos, self.commit, self.token = repos, commit, token
        self.served_bytes: dict[str, int] = {}
        self.requests: list[tuple[str, str | None]] = []

    def handler(self) -> type[BaseHTTPRequestHandler]:
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                return

            def do_GET(self) -> None:  # noqa: N802
                hub.requests.append((self.path, self.headers.get("Range")))
                if hub.token and self.headers.get("Authorization") != f"Bearer {hub.token}":
                    self._send(401, b'{"error": "unauthorized"}', {"X-Error-Code": "RepoNotFound"})
                    return
                path = self.path.split("?")[0]
                m = re.match(r"^/api/models/([^/]+/[^/]+)(?:/revision/([^/]+))?$", path)
                if m:
                    return self._info(m.group(1))
                m = re.match(r"^/([^/]+/[^/]+)/resolve/([^/]+)/(.+)$", path)
                if m:
                    return self._file(m.group(1), m.group(3))
                self._send(404, b"{}", {"X-Error-Code": "EntryNotFound"})

            def _info(self, repo: str) -> None:
                if repo not in hub.repos:
                    self._send(404, b'{"error": "no repo"}', {"X-Error-Code": "RepoNotFound"})
                    return
                files = [{"rfilename": f.name} for f in sorted(hub.repos[repo].iterdir())]
                body = json.dumps({"id": repo, "sha": hub.commit, "siblings": files}).encode()
                self._send(200, body, {"Content-Type": "application/json"})

            def _file(self, repo: str, name: str) -> None:
                folder = hub.repos.get(repo)
                f = folder / name if folder else None
                if f is None or not f.is_file():
                    self._send(404, b"{}", {"X-Error-Code": "EntryNotFound"})
                    return
                size = f.stat().st_size
                rng = self.headers.get("Range")
                status, headers, start, end = 200, {}, 0, size - 1
                if rng:
                    a, b = rng.removeprefix("bytes=").split("-")
                    start, end = int(a), min(int(b), size - 1)
                    headers["Content-Range"] = f"bytes {start}-{end}/{size}"
                    status = 206
                with f.open("rb") as handle:
                    handle.seek(start)
                    data = handle.read(end - start + 1)
                hub.served_bytes[name] = hub.served_bytes.get(name, 0) + len(data)
                self._send(status, data, headers)

            def _send(self, status: int, body: bytes, headers: dict[str, str]) -> None:
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        return Handler


@contextmanager
def serve_hub(hub: FakeHub) -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), hub.handler())
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


# --------------------------------------------------------------------------------------
# GGUF
# --------------------------------------------------------------------------------------


def write_gguf(
    path: Path,
    layers: int = 4,
    types: dict[str, str] | None = None,
    tie: bool = False,
    arch: str = "llama",
    hidden: int = 256,
    ff: int = 512,
    heads: int = 4,
    kv_heads: int = 2,
    vocab: int = 512,
    context: int = 4096,
) -> int:
    """A GGUF model written by the gguf package; returns the tensor bytes it wrote
    (GGUFReader's n_bytes summed)."""
    import gguf

    t = {"attn": "Q8_0", "ffn": "Q4_K", "embd": "Q6_K", "out": "Q8_0", "norm": "F32"} | (
        types or {}
    )
    w = gguf.GGUFWriter(str(path), arch)
    w.add_block_count(layers)
    w.add_embedding_length(hidden)
    w.add_feed_forward_length(ff)
    w.add_head_count(heads)
    w.add_head_count_kv(kv_heads)
    w.add_context_length(context)
    w.add_vocab_size(vocab)
    w.add_name("tiny-gguf")
    d = hidden // heads

    def add(name: str, rows: int, cols: int, kind: str) -> None:
        typ = gguf.GGMLQuantizationType[t[kind]]
        if typ == gguf.GGMLQuantizationType.F32:
            w.add_tensor(name, np.zeros((rows, cols) if rows > 1 else (cols,), dtype=np.float32))
            return
        if typ == gguf.GGMLQuantizationType.F16:
            w.add_tensor(name, np.zeros((rows, cols), dtype=np.float16))
            return
        block, size = gguf.GGML_QUANT_SIZES[typ]
        w.add_tensor(name, np.zeros((rows, cols // block * size), dtype=np.uint8), raw_dtype=typ)

    add("token_embd.weight", vocab, hidden, "embd")
    for i in range(layers):
        p = f"blk.{i}."
        add(p + "attn_norm.weight", 1, hidden, "norm")
        add(p + "attn_q.weight", heads * d, hidden, "attn")
        add(p + "attn_k.weight", kv_heads * d, hidden, "attn")
        add(p + "attn_v.weight", kv_heads * d, hidden, "attn")
        add(p + "attn_output.weight", hidden, heads * d, "attn")
        add(p + "ffn_norm.weight", 1, hidden, "norm")
        add(p + "ffn_gate.weight", ff, hidden, "ffn")
        add(p + "ffn_up.weight", ff, hidden, "ffn")
        add(p + "ffn_down.weight", hidden, ff, "ffn")
    add("output_norm.weight", 1, hidden, "norm")
    if not tie:
        add("output.weight", vocab, hidden, "out")
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    reader = gguf.GGUFReader(str(path))
    return sum(int(x.n_bytes) for x in reader.tensors)
