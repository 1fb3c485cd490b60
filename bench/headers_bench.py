"""How fast gpuplan reads checkpoint headers, and what a catalog query costs cold.

    PYTHONPATH=src python3 bench/headers_bench.py                 # both, baseline = git ref main
    PYTHONPATH=src python3 bench/headers_bench.py --baseline-ref HEAD~5 --runs 9

1. Headers: a 100-shard checkpoint (model.safetensors.index.json + 100 files, ~47,000 tensors
   of a DeepSeek-V3-sized MoE: 61 layers × 256 experts) is written as header-only sparse files,
   then resolved (config + every header) from the local folder and from a fake Hub on loopback
   (two range requests per shard), and the tensors classified and placed (the weights line of
   `serve --tp 8`). Target: well under a second.
2. Cold catalog query: `gpuplan serve llama-3.1-8b --json` in a fresh interpreter, median of
   --runs, for this tree and for the baseline ref (exported with `git archive`), beside
   `python -c pass`; and whether huggingface_hub / gguf were imported on that path (they must not).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "tests"))

SHARDS = 100
TENSORS_PER_SHARD = 500
QUERY = "from gpuplan.cli.main import main; main(['serve', 'llama-3.1-8b', '--json'])"


def _tensors() -> list[tuple[str, list[int]]]:
    """A DeepSeek-V3-sized MoE decoder's tensors (61 layers × 256 experts: ~47,000)."""
    h, ff, v = 7168, 2048, 129280
    out = [("model.embed_tokens.weight", [v, h])]
    for layer in range(61):
        p = f"model.layers.{layer}."
        out += [(p + f"self_attn.{n}_proj.weight", [h, h]) for n in ("q", "k", "v", "o")]
        out += [(p + "input_layernorm.weight", [h]), (p + "post_attention_layernorm.weight", [h])]
        out.append((p + "mlp.gate.weight", [256, h]))
        for e in range(256):
            q = f"{p}mlp.experts.{e}."
            out += [(q + "gate_proj.weight", [ff, h]), (q + "up_proj.weight", [ff, h])]
            out.append((q + "down_proj.weight", [h, ff]))
    out += [("model.norm.weight", [h]), ("lm_head.weight", [v, h])]
    return out


def write_sharded(folder: Path) -> int:
    """Header-only shards (sparse files of the right size): what a reader must not touch."""
    folder.mkdir(parents=True, exist_ok=True)
    config = {
        "model_type": "mixtral",
        "hidden_size": 7168,
        "intermediate_size": 2048,
        "num_hidden_layers": 61,
        "num_attention_heads": 56,
        "num_key_value_heads": 56,
        "num_local_experts": 256,
        "num_experts_per_tok": 8,
        "vocab_size": 129280,
        "torch_dtype": "bfloat16",
    }
    (folder / "config.json").write_text(json.dumps(config))
    tensors = _tensors()
    per = -(-len(tensors) // SHARDS)
    weight_map, total = {}, 0
    for s in range(SHARDS):
        header, offset = {}, 0
        for name, shape in tensors[s * per : (s + 1) * per]:
            size = 2
            for d in shape:
                size *= d
            header[name] = {
                "dtype": "BF16",
                "shape": shape,
                "data_offsets": [offset, offset + size],
            }
            offset += size
        raw = json.dumps(header).encode()
        fname = f"model-{s + 1:05d}-of-{SHARDS:05d}.safetensors"
        with (folder / fname).open("wb") as f:
            f.write(struct.pack("<Q", len(raw)) + raw)
            f.truncate(8 + len(raw) + offset)  # sparse: no data written, none read
        weight_map.update(dict.fromkeys(header, fname))
        total += offset
    (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    return total


def bench_headers() -> None:
    from gpuplan.catalog.sources.local import from_path
    from gpuplan.catalog.sources.remote import from_hub

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "ckpt"
        total = write_sharded(folder)
        t0 = time.perf_counter()
        src = from_path(folder, str(folder))
        local = time.perf_counter() - t0
        assert src.checkpoint is not None and src.checkpoint.total_bytes == total
        print(
            f"local   {SHARDS} shards, {len(src.checkpoint.tensors):,} tensors,"
            f" {total / 1e9:.1f} GB described: headers read in {local * 1000:.0f} ms"
        )
        from gpuplan.api.common import resolve, resolve_weight_format
        from gpuplan.engine.weights import weights_per_gpu

        ref = resolve(str(folder))
        t0 = time.perf_counter()
        fmt = resolve_weight_format(ref.arch, None, ref.stored)
        per_gpu = weights_per_gpu(ref.arch, fmt, 8, 1).bytes
        placed = time.perf_counter() - t0
        print(
            f"place   classify every tensor and place it at tp=8: {placed * 1000:.0f} ms"
            f" ({per_gpu / 1e9:.2f} GB per GPU)"
        )
        from model_files import FakeHub, serve_hub

        hub = FakeHub({"bench/model": folder})
        os.environ.pop("HF_HUB_OFFLINE", None)
        with serve_hub(hub) as url:
            os.environ["HF_ENDPOINT"] = url
            t0 = time.perf_counter()
            src = from_hub("bench/model", None)
            remote = time.perf_counter() - t0
        served = sum(v for k, v in hub.served_bytes.items() if k.endswith(".safetensors"))
        assert src.checkpoint is not None and src.checkpoint.total_bytes == total
        print(
            f"hub     same checkpoint from a loopback Hub: {remote * 1000:.0f} ms,"
            f" {len(hub.requests)} requests, {served / 1e6:.1f} MB of headers served"
            f" of {total / 1e9:.1f} GB"
        )


def _median_run(cmd: list[str], env: dict[str, str], runs: int) -> float:
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def bench_cold(baseline_ref: str, runs: int) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    py = sys.executable
    empty = _median_run([py, "-c", "pass"], env, runs)
    ours = _median_run([py, "-c", QUERY], env, runs)
    probe = (
        QUERY
        + "; import sys; print(sorted(m for m in ('huggingface_hub', 'gguf', 'safetensors') if m in sys.modules))"
    )
    loaded = subprocess.run([py, "-c", probe], env=env, capture_output=True, text=True, check=True)
    print(f"cold    python -c pass: {empty * 1000:.0f} ms")
    print(
        f"cold    catalog query (this tree): {ours * 1000:.0f} ms; heavy modules imported: {loaded.stdout.strip().splitlines()[-1]}"
    )
    with tempfile.TemporaryDirectory() as tmp:
        archive = subprocess.run(
            ["git", "-C", str(ROOT), "archive", baseline_ref, "src"],
            capture_output=True,
            check=False,
        )
        if archive.returncode:
            print(f"cold    baseline {baseline_ref!r} not found; skipped")
            return
        subprocess.run(["tar", "-x", "-C", tmp], input=archive.stdout, check=True)
        base = _median_run([py, "-c", QUERY], {**env, "PYTHONPATH": str(Path(tmp) / "src")}, runs)
    print(
        f"cold    catalog query ({baseline_ref}): {base * 1000:.0f} ms  (this tree / baseline = {ours / base:.2f})"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--baseline-ref", default="main")
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    bench_headers()
    bench_cold(args.baseline_ref, args.runs)


if __name__ == "__main__":
    main()
