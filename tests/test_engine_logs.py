"""Engine startup logs (tests/data/engine_logs/): gpuplan reads each log's figures back, predicts
each launch with the engine version's rules (bars at today's result), and reads logs safely."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gpuplan.api import check_log, engine_serve
from gpuplan.catalog.engine_logs import parse_log
from gpuplan.catalog.llamacpp_logs import parse_llamacpp_log
from gpuplan.engine.model_reader import architecture_from_config
from gpuplan.engine.precision import get_precision
from gpuplan.engine.profiles.llamacpp.bill import (
    context_cells,
    layer_device,
    options_from_args,
    requested_context,
    split_points,
)
from gpuplan.engine.profiles.llamacpp.bill import kv_layout as cpp_kv_layout
from gpuplan.engine.profiles.vllm.kv_layout import kv_layout
from gpuplan.errors import GpuplanError

DATA = Path(__file__).parent / "data"
CASES: list[dict[str, Any]] = json.loads(
    (DATA / "engine_logs" / "vllm-0.19-h100.json").read_text()
)["cases"]
PUBLIC: list[dict[str, Any]] = json.loads(
    (DATA / "engine_logs" / "public-reports.json").read_text()
)["cases"]
GIB = 2**30


def config_for(model_id: str, name: str | None = None) -> dict[str, Any]:
    want = (name or model_id.replace("/", "--") + ".json").lower()
    for p in (DATA / "engine_configs").glob("*.json"):
        if p.name.lower() == want:
            return dict(json.loads(p.read_text()))
    raise AssertionError(f"no config.json for {model_id}")


def predict(case: dict[str, Any]):
    report = check_log(parse_log(case["verbatim_excerpt"]), config_for(case["model_id"]))
    assert report.plan is not None
    return report


@pytest.mark.parametrize("case", CASES, ids=[c["case_id"] for c in CASES])
def test_log_figures_are_read_back_exactly(case):
    log = parse_log(case["verbatim_excerpt"])
    assert log.engine == "vllm"
    f = log.figures
    for field in (
        "weights_gib",
        "non_torch_gib",
        "activation_peak_gib",
        "kv_cache_gib",
        "cudagraph_gib",
        "kv_cache_tokens",
        "total_non_kv_gib",
    ):
        if case[field] is not None:
            assert f[field] == pytest.approx(case[field]), field
    if case["max_concurrency"]:
        assert f["max_concurrency"] == pytest.approx(case["max_concurrency"]["x"])
        assert f["concurrency_len"] == case["max_concurrency"]["tokens_per_request"]
    assert log.args.get("max_model_len", case["max_model_len"]) == case["max_model_len"]


@pytest.mark.parametrize(
    "case", [c for c in CASES if c["kv_cache_tokens"]], ids=lambda c: c["case_id"]
)
def test_kv_layout_turns_the_logged_memory_into_the_logged_tokens(case):
    """Given the engine's own KV memory, the block arithmetic is exact (2-decimal GiB aside)."""
    report = predict(case)
    bill = report.plan.bill
    layout = kv_layout(
        bill.launch.arch, bill.launch, bill.block_size, range(bill.launch.arch.num_layers)
    )
    if bill.launch.pp > 1:
        pytest.skip("per-stage minimum: only rank 0's memory is logged")
    blocks = int(case["kv_cache_gib"] * GIB) // layout.page_bytes // layout.slots
    tokens = blocks // layout.groups * bill.block_size
    assert tokens == pytest.approx(case["kv_cache_tokens"], rel=0.003)


def test_predictions_meet_the_acceptance_bar(capsys):
    """Every case of every corpus file, predicted from its inputs. The bars are today's result
    (a regression of one case fails; an improvement means raising them): the 61 H100 0.19 logs
    all within 2 % (weights) and 10 % (KV tokens); over all files weights within 2 % on 117 of
    118, KV within 10 % on 107 of the 110 cases whose inputs are known, every failed start (13)
    predicted as a failure."""
    from engine_cases import load_cases, predict, summary_counts

    results = [predict(c) for c in load_cases()]
    h100 = [r for r in results if r.case.file == "vllm-0.19-h100.json"]
    assert len(h100) == 61
    assert sum(bool(r.weights_ok) for r in h100) == 61
    assert sum(bool(r.kv_ok) for r in h100) == 61
    counts = summary_counts(results)
    with capsys.disabled():
        print(f"\nengine-log corpus: {counts}")
    assert counts == {"weights": (117, 118), "kv": (107, 110), "failed_starts": (13, 13)}


def test_no_false_alarm_and_the_bars_per_gpu_class():
    """Issue 20: no run that started is predicted not to start (the SGLang pool below
    --context-length was one: SGLang caps a request at pool − 1 tokens and starts, tp_worker.py
    max_req_len), and each GPU class holds today's figures."""
    from engine_cases import class_counts, false_alarms, load_cases, predict

    results = [predict(c) for c in load_cases()]
    alarms, started = false_alarms(results)
    assert alarms == 0 and started == 125
    assert class_counts(results) == {
        "SXM": {"weights": (90, 90), "kv": (85, 87), "failed_starts": (8, 8)},
        "PCIe datacenter": {"weights": (10, 11), "kv": (9, 10), "failed_starts": (1, 1)},
        "workstation/consumer": {"weights": (10, 10), "kv": (7, 7), "failed_starts": (4, 4)},
        "AMD": {"weights": (7, 7), "kv": (6, 6), "failed_starts": (0, 0)},
    }


def test_new_corpus_covers_gpus_versions_and_engines():
    """public-logs.json: at least 30 sourced cases, five GPU types besides H100 (PCIe and
    NVLink, consumer and datacenter), four vLLM versions with V0 among them, and SGLang."""
    new = json.loads((DATA / "engine_logs" / "public-logs.json").read_text())["cases"]
    assert len(new) >= 30
    assert len({c["case_id"] for c in new}) == len(new)
    gpus = {c["gpu"] for c in new} - {"h100"}
    assert len(gpus) >= 5 and {"rtx-3090", "t4", "l4"} <= gpus and {"h200", "mi300x"} <= gpus
    versions = {c["engine_version"] for c in new if c["engine"] == "vllm"}
    assert len(versions) >= 4
    assert any(v < "0.8" for v in versions)  # V0
    assert any(c["engine"] == "sglang" for c in new)
    for c in new:
        assert c["verbatim_excerpt"] and (c["source_url"] or c["source"]), c["case_id"]
        config_for(c["model_id"], c.get("config"))  # every model's config.json is in the repo


def test_issue20_corpus_is_sourced_and_resolvable():
    """public-logs-3.json (issue 20): every case new to the corpus, with a source page, the
    lines its figures were read from, a GPU the catalog knows and a config.json in the repo."""
    from gpuplan.catalog import get_gpu

    old = {
        c["case_id"]
        for name in ("vllm-0.19-h100.json", "public-reports.json", "public-logs.json")
        for c in json.loads((DATA / "engine_logs" / name).read_text())["cases"]
    }
    new = json.loads((DATA / "engine_logs" / "public-logs-3.json").read_text())["cases"]
    assert len(new) >= 2
    assert len({c["case_id"] for c in new}) == len(new) and not old & {c["case_id"] for c in new}
    for c in new:
        assert c["verbatim_excerpt"] and c["source_url"], c["case_id"]
        get_gpu(c["gpu"])
        config_for(c["model_id"], c.get("config"))


_EARLIER = (
    "vllm-0.19-h100.json",
    "public-reports.json",
    "public-logs.json",
    "public-logs-3.json",
    "public-logs-4.json",
    "public-logs-5.json",
    "public-logs-6.json",
)


def _new_batch(name: str) -> list[dict]:
    """The cases of `name`, checked new to the corpus read before it (no case id and no source
    page already used), each with its page or the search index id of a repository file shown
    without its path, the lines its figures were read from, a known GPU and a config.json."""
    from gpuplan.catalog import get_gpu

    before = _EARLIER[: _EARLIER.index(name)] if name in _EARLIER else _EARLIER
    earlier = [
        c for f in before for c in json.loads((DATA / "engine_logs" / f).read_text())["cases"]
    ]
    new = json.loads((DATA / "engine_logs" / name).read_text())["cases"]
    ids = {c["case_id"] for c in new}
    assert new and len(ids) == len(new) and not ids & {c["case_id"] for c in earlier}
    assert not ({c["source_url"] for c in new} - {None}) & {c.get("source_url") for c in earlier}
    for c in new:
        assert c["verbatim_excerpt"] and (c["source_url"] or "index id" in c["caveats"])
        get_gpu(c["gpu"])
        config_for(c["model_id"], c.get("config"))
    return new


def test_issue20_second_batch_is_new_sourced_and_resolvable():
    """public-logs-4.json (issue 20, second batch of vLLM logs)."""
    _new_batch("public-logs-4.json")


def test_issue20_pcie_and_amd_batch_is_new_sourced_and_resolvable():
    """public-logs-6.json (issue 20, PCIe datacenter and AMD batch): in those classes, with
    their launch arguments and logged figures."""
    from engine_cases import gpu_class

    new = _new_batch("public-logs-6.json")
    classes = [gpu_class(c["gpu"]) for c in new]
    assert classes.count("PCIe datacenter") >= 2 and classes.count("AMD") >= 4
    assert sum(c["gpu"] == "mi300x" for c in new) >= 3  # AMD Instinct
    for c in new:
        assert c["launch_args"] and c["logged"], c["case_id"]


def test_issue20_v0_and_amd_batch_is_new_sourced_and_resolvable():
    """public-logs-7.json (issue 20, V0 and AMD batch): AMD Instinct and Radeon PRO logs with
    their launch arguments (every input printed) and logged block counts."""
    from engine_cases import gpu_class

    new = _new_batch("public-logs-7.json")
    assert sum(gpu_class(c["gpu"]) == "AMD" for c in new) >= 2
    assert {c["gpu"] for c in new} >= {"mi300x", "w7900"}
    for c in new:
        assert c["launch_args"] and c["logged"]["gpu_blocks"] and c["inputs_known"], c["case_id"]


@pytest.mark.parametrize(
    "case",
    [
        c
        for name in (
            "public-logs.json",
            "public-logs-3.json",
            "public-logs-4.json",
            "public-logs-6.json",
            "public-logs-7.json",
        )
        for c in json.loads((DATA / "engine_logs" / name).read_text())["cases"]
        if c["source_type"] in ("repo_log", "issue", "pull_request", "repo_note")
    ],
    ids=lambda c: c["case_id"],
)
def test_new_log_figures_are_read_back(case):
    """Where a case's excerpt is a log, gpuplan's reader gets the recorded figures from it."""
    log = parse_log(case["verbatim_excerpt"])
    assert log.engine == case["engine"]
    keys = {
        "weights_gib": "weights_gib",
        "kv_cache_gib": "kv_cache_gib",
        "gpu_blocks": "gpu_blocks_v0",
    }
    keys.update({"kv_cache_tokens": "kv_cache_tokens", "weights_gb": "weights_gb"})
    if "kv_cache_tokens" not in log.figures and "kv_cache_tokens_limit" in log.figures:
        keys["kv_cache_tokens"] = "kv_cache_tokens_limit"  # the failed-start message's figure
    for field, figure in keys.items():
        if field in case["logged"] and figure in log.figures:
            assert log.figures[figure] == pytest.approx(case["logged"][field]), field


def test_cases_cover_the_required_kinds():
    ids = " ".join(c["model_id"].lower() for c in CASES)
    for kind in (
        "gemma-2",
        "gemma-3",
        "deepseek-v2",
        "mixtral",
        "qwen3-30b-a3b",
        "gpt-oss",
        "w4a16",
        "fp8",
    ):
        assert kind in ids, kind
    assert {c["tensor_parallel_size"] for c in CASES} >= {1, 2, 4}
    assert any(c["kv_cache_dtype"] == "fp8" for c in CASES)


def _kind_of_gpu(case) -> str | None:
    """The catalog GPU a case ran on, or None where the report leaves it unstated."""
    text = case.get("gpu_model") or ""
    if not text or text.startswith("unspecified"):
        return None
    return _public_gpu(case)


def test_combined_table_covers_the_required_kinds():
    """H100 file + public file together: the acceptance list, as far as the data really goes
    (no TP 8 log with KV or weight figures has been found yet; see README "Known misses")."""
    table = CASES + PUBLIC
    vllm = [c for c in table if c["engine"] == "vllm"]
    quants = {str(c["quantization"]).lower() for c in vllm}
    ids = " ".join(c["model_id"].lower() for c in vllm)
    assert any(q.startswith("awq") for q in quants), "AWQ"
    assert any(q.startswith("gptq") for q in quants), "GPTQ"
    assert "fp8" in quants or "fp8" in ids, "fp8 weights"
    assert any(c["kv_cache_dtype"] == "fp8" for c in vllm), "fp8 KV"
    for kind, models in {
        "MLA": ("deepseek-v2", "kimi-vl"),
        "MoE": ("mixtral", "qwen3-30b-a3b", "gpt-oss", "qwen1.5-moe"),
        "sliding window": ("gemma-2", "gemma-3", "gpt-oss"),
        "GQA": ("llama-3.1-8b", "qwen2-7b"),
    }.items():
        assert any(m in ids for m in models), kind
    assert {c["tensor_parallel_size"] for c in vllm} >= {1, 2, 4}
    assert any((c["pipeline_parallel_size"] or 1) > 1 for c in vllm)
    gpus = {g for g in map(_kind_of_gpu, vllm) if g}
    assert len(gpus) >= 4, gpus
    # V1 logs (not only V0) on GPUs other than H100, with both KV memory and tokens printed
    v1_other = {
        _kind_of_gpu(c)
        for c in vllm
        if "V0" not in (c.get("engine_version") or "")
        and c["kv_cache_gib"]
        and c["kv_cache_tokens"]
        and _kind_of_gpu(c) not in (None, "h100")
    }
    assert v1_other >= {"a100-80gb", "a100-40gb", "rtx-3090", "l4"}, v1_other


def test_failed_start_is_predicted():
    """A launch whose weights do not fit in the utilisation budget: no memory for the KV cache."""
    plan = engine_serve(
        config_for("moonshotai/Kimi-Dev-72B"),
        "h100",
        engine="vllm",
        args={"tensor_parallel_size": 2, "max_model_len": 8192, "gpu_memory_utilization": 0.85},
        gpu_memory=round(79.19 * GIB),
    )
    assert not plan.fits
    assert "No available memory" in plan.bill.failure
    assert plan.bill.kv_cache_bytes < 0


def test_too_long_for_the_cache_is_predicted():
    plan = engine_serve(
        config_for("moonshotai/Kimi-Dev-72B"),
        "h100",
        engine="vllm",
        args={"tensor_parallel_size": 2, "max_model_len": 131072, "gpu_memory_utilization": 0.95},
        gpu_memory=round(79.19 * GIB),
    )
    assert not plan.fits and "max_model_len" in plan.bill.failure


def test_truncated_log_is_reported_not_a_crash():
    case = CASES[0]
    head = "\n".join(case["verbatim_excerpt"].splitlines()[:2])
    report = check_log(parse_log(head), config_for(case["model_id"]))
    assert any("truncated" in p for p in report.problems)
    assert {r.key for r in report.rows} >= {"weights_gib", "kv_cache_tokens"}


def test_the_banner_version_selects_the_rules():
    text = "INFO vLLM API server version 0.11.0\n" + CASES[0]["verbatim_excerpt"]
    report = check_log(parse_log(text), config_for(CASES[0]["model_id"]))
    assert report.plan.bill.version.startswith("vLLM 0.11.0")
    assert report.plan.bill.settings["sampler"] == "native"
    bare = check_log(parse_log(CASES[0]["verbatim_excerpt"]), config_for(CASES[0]["model_id"]))
    assert any("no vLLM version" in p for p in bare.problems)


def test_v0_log_is_flagged():
    case = next(c for c in PUBLIC if c["case_id"].endswith("v0-20k"))
    log = parse_log(case["verbatim_excerpt"])
    assert log.v0 and log.figures["gpu_blocks_v0"] == 1952


def test_not_a_log():
    with pytest.raises(GpuplanError, match="does not look like"):
        parse_log("hello world\n")


@pytest.mark.parametrize("case", PUBLIC, ids=[c["case_id"] for c in PUBLIC])
def test_public_reports_parse_without_crashing(case):
    try:
        log = parse_log(case["verbatim_excerpt"])
    except GpuplanError:
        return
    if case["kv_cache_tokens"] and "kv_cache_tokens" in log.figures:
        assert log.figures["kv_cache_tokens"] == case["kv_cache_tokens"]


def test_sglang_public_case_matches_the_pool_arithmetic():
    """Qwen3-235B-A22B-FP8 on 4 × H100, SGLang: 367,404 tokens = K+V 16.46 GB (one KV head per rank)."""
    case = next(c for c in PUBLIC if c["engine"] == "sglang" and c["kv_cache_tokens"])
    plan = engine_serve(
        config_for(case["model_id"]),
        "h100",
        engine="sglang",
        args={"tp_size": 4, "mem_fraction_static": case["mem_fraction_static"]},
    )
    cell = plan.bill.kv_bytes_per_token
    assert case["kv_cache_tokens"] * cell / GIB == pytest.approx(
        case["extra"]["k_size_gb"] + case["extra"]["v_size_gb"], rel=0.01
    )
    assert plan.kv_capacity_tokens == pytest.approx(case["kv_cache_tokens"], rel=0.25)


# Public bug reports and repository logs: other GPUs and other vLLM versions. Matched in order
# against the case's `gpu_model` text, most specific first ("A100 40GB" before "A100",
# "L40S" before "L4", "RTX 5090" before the generic names).
_PUBLIC_GPU = {
    "3090": "rtx-3090",
    "4090": "rtx-4090",
    "5090": "rtx-5090",
    "A100 40GB": "a100-40gb",
    "A100": "a100-80gb",
    "L40S": "l40s",
    "L4": "l4",
    "A10": "a10",
    "H200": "h200",
    "H100": "h100",
    "B200": "b200",
    "MI300X": "mi300x",
}
_PUBLIC_VLLM = [c for c in PUBLIC if c["engine"] == "vllm"]


def _public_gpu(case) -> str:
    text = case.get("gpu_model") or ""
    return next((v for k, v in _PUBLIC_GPU.items() if k in text), "h100")


def _public_plan(case):
    args = {
        "tensor_parallel_size": case.get("tensor_parallel_size") or 1,
        "pipeline_parallel_size": case.get("pipeline_parallel_size") or 1,
    }
    if case.get("quantization"):
        args["quantization"] = case["quantization"]
    if case.get("kv_cache_dtype") not in (None, "auto"):
        args["kv_cache_dtype"] = case["kv_cache_dtype"]
    return engine_serve(config_for(case["model_id"]), _public_gpu(case), engine="vllm", args=args)


@pytest.mark.parametrize(
    "case", [c for c in _PUBLIC_VLLM if c["weights_gib"]], ids=lambda c: c["case_id"]
)
def test_public_reports_weights_within_2_percent(case):
    """Weights as loaded on other GPUs and versions: RTX 3090 (V0; V1 0.22 with AWQ), 2 × RTX 4090
    (V0, TP2), A100 80GB/40GB (V1 0.10.1: Qwen2-7B at TP1/TP2, gpt-oss-120b MXFP4 at TP4;
    gpt-oss-20b MXFP4 on 0.19, Marlin padding on Ampere), H100 (gpt-oss-120b)."""
    weights = _public_plan(case).bill.item("weights").bytes / GIB
    assert weights == pytest.approx(case["weights_gib"], rel=0.02)


@pytest.mark.parametrize(
    "case",
    [
        c
        for c in _PUBLIC_VLLM
        if c["kv_cache_tokens"]
        and (c["kv_cache_gib"] or 0) > 0
        and "V0" not in (c.get("engine_version") or "")
        and (c.get("pipeline_parallel_size") or 1) == 1
    ],
    ids=lambda c: c["case_id"],
)
def test_public_reports_kv_layout(case):
    """V1 logs from other GPUs and versions: the logged KV memory → the logged tokens (V0 counted
    blocks differently and is left out; PP logs show rank 0 only)."""
    bill = _public_plan(case).bill
    layout = kv_layout(
        bill.launch.arch, bill.launch, bill.block_size, range(bill.launch.arch.num_layers)
    )
    blocks = int(case["kv_cache_gib"] * GIB) // layout.page_bytes // layout.slots
    tokens = blocks // layout.groups * bill.block_size
    assert tokens == pytest.approx(case["kv_cache_tokens"], rel=0.02)


def test_rope_cache_tables_follow_vllm_rotary_classes():
    """vLLM's RoPE cos/sin buffers (rotary_embedding/__init__.py::get_rope): Gemma 3 builds a
    linear-scaled global table (max_position × 8) and a local one; Llama 4 one llama3 table of
    max_position rows; gpt-oss a yarn table of original_max_position × factor rows."""
    from gpuplan.engine.architecture import architecture_from_config
    from gpuplan.engine.profiles.common import rope_tables

    gemma = architecture_from_config(config_for("google/gemma-3-4b-it"))
    assert rope_tables(gemma) == [(131072 * 8, 256), (131072, 256)]
    scout = architecture_from_config(config_for("meta-llama/Llama-4-Scout-17B-16E-Instruct"))
    assert rope_tables(scout) == [(10485760, 128)]
    oss = architecture_from_config(config_for("openai/gpt-oss-20b"))
    assert rope_tables(oss) == [(4096 * 32, 64)]


def test_llama4_vision_params_match_transformers():
    """The Llama 4 encoder + adapter + projector count equals transformers' module on meta."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from gpuplan.engine.vision import vision_encoder_params

    cfg = config_for("meta-llama/Llama-4-Scout-17B-16E-Instruct")
    small = {**cfg, "text_config": {**cfg["text_config"], "num_hidden_layers": 1}}
    small = {k: v for k, v in small.items() if k not in ("architectures", "transformers_version")}
    hf = transformers.AutoConfig.for_model(**small)
    with torch.device("meta"):
        model = transformers.Llama4ForConditionalGeneration(hf)
    expected = sum(
        p.numel()
        for n, p in model.named_parameters()
        if "vision_model" in n or "multi_modal_projector" in n
    )
    assert vision_encoder_params(cfg) == expected


# --- hardening (issue 10, logs): bounded, linear, nothing opened, nothing printed raw ---------


def test_pathological_log_parses_in_linear_time():
    """Lines full of needles and no numbers (the quadratic case of a `.*?` pattern)."""
    import time

    from gpuplan.catalog.engine_logs import MAX_LINE_CHARS

    line = "Load weight end. " * (MAX_LINE_CHARS // 17) + "\n"
    text = "vllm sglang\n" + line * 40 + ("Maximum concurrency for " * 500 + "\n") * 40
    start = time.process_time()
    parse_log(text)
    assert time.process_time() - start < 5


def test_oversized_binary_and_endless_inputs_are_bounded(tmp_path):
    from gpuplan.catalog.engine_logs import MAX_LOG_BYTES, parse_log_bytes, read_log

    big = tmp_path / "big.log"
    with big.open("wb") as fh:
        fh.write(CASES[0]["verbatim_excerpt"].encode())
        fh.write(b"\nINFO filler line\n" * (MAX_LOG_BYTES // 17 + 10))
    log = read_log(big)
    assert log.figures["kv_cache_tokens"] == CASES[0]["kv_cache_tokens"]
    assert any("first 16 MiB" in p for p in log.problems)
    with pytest.raises(GpuplanError, match="binary"):
        parse_log_bytes(b"\x00" * 4096)
    with pytest.raises(GpuplanError, match="a device"):
        read_log("/dev/zero")  # refused before it is opened (safe_read: regular files only)


def test_a_path_named_in_a_log_is_never_opened(tmp_path, monkeypatch):
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(config_for("Qwen/Qwen3-8B")))
    text = CASES[0]["verbatim_excerpt"].replace("codellama/CodeLlama-7b-hf", str(cfg))
    log = parse_log(text)
    assert log.model == str(cfg)
    opened = []
    real_open = Path.open

    def spy(self, *a, **k):
        opened.append(str(self))
        return real_open(self, *a, **k)

    monkeypatch.setattr(Path, "open", spy)
    with pytest.raises(GpuplanError, match="never opened"):
        check_log(log)
    assert str(cfg) not in opened
    # a path whose last part names a catalog model is matched by name, not read
    log = parse_log(
        CASES[0]["verbatim_excerpt"].replace("codellama/CodeLlama-7b-hf", "/m/Qwen3-8B")
    )
    assert check_log(log).plan.model_id == "qwen3-8b"


def test_control_characters_and_markup_from_a_log_are_not_printed_raw(tmp_path, capsys):
    from gpuplan.cli.main import main

    text = CASES[0]["verbatim_excerpt"].replace(
        "codellama/CodeLlama-7b-hf", "llama-3.1-8b\x1b[31m[/][bold]x"
    )
    text = "vLLM API server version 0.19.0\x1b]0;pwn\x07[/]\n" + text
    log = parse_log(text)
    assert "\x1b" not in (log.model or "") and "\x07" not in (log.version or "")
    path = tmp_path / "evil.log"
    path.write_text(text)
    code = main(["check", str(path), "--model", "llama-3.1-8b"])
    out = capsys.readouterr()
    assert code == 0 and "\x1b]" not in out.out and "\x07" not in out.out
    assert "[/][bold]" in out.out  # shown as text, not read as markup


def test_an_unreadable_launch_line_says_so():
    text = CASES[0]["verbatim_excerpt"]
    start = text.index("non-default args: {")
    broken = text[: start + 40] + text[text.index("\n", start) :]
    log = parse_log(broken)
    assert any("could not be read" in p for p in log.problems)
    bare = "\n".join(line for line in text.splitlines() if "non-default args" not in line)
    assert any("no launch arguments" in p for p in parse_log(bare).problems)


def test_failed_start_message_gives_the_kv_capacity():
    """vLLM's failed-start message names the KV capacity it found (vllm#10517, RTX 3090, the
    29k launch: 1,478 blocks of 16 = 23,648 tokens); the reader keeps it as its own figure."""
    log = parse_log(
        "# GPU blocks: 1478, # CPU blocks: 2048\n"
        "The model's max seq len (29000) is larger than the maximum number of tokens that can be"
        " stored in KV cache (23648). Try increasing `gpu_memory_utilization` or decreasing"
        " `max_model_len` when initializing the engine."
    )
    assert log.figures["kv_cache_tokens_limit"] == 23648 == 1478 * 16
    assert "KV cache too small for max_model_len" in log.errors


# --------------------------------------------------------------------------------------
# llama.cpp load logs (tests/data/engine_logs/llamacpp-logs.json)
# --------------------------------------------------------------------------------------

CPP = json.loads((DATA / "engine_logs" / "llamacpp-logs.json").read_text())["cases"]


@pytest.mark.parametrize("case", CPP, ids=[c["case_id"] for c in CPP])
def test_llamacpp_log_figures_are_read_back_exactly(case):
    """Every figure stored in `logged` is what the reader finds in the verbatim lines, or (the
    keys named in `logged_from`) a number of the table row the excerpt quotes."""
    log = parse_llamacpp_log(case["verbatim_excerpt"])
    lg = dict(case["logged"])
    for key in case.get("logged_from") or ():
        for mib in lg.pop(key).values():
            assert f"{mib:.2f} MiB" in case["verbatim_excerpt"], (key, mib)
    assert log.kv_mib == lg.get("kv_mib", {})
    assert log.compute_mib == lg.get("compute_mib", {})
    assert log.model_mib == lg.get("model_mib", {})
    assert log.failed_alloc_mib == lg.get("failed_alloc_mib", {})
    assert log.context.get("n_ctx") == lg.get("n_ctx")
    assert log.context.get("kv_size") == lg.get("kv_size")
    assert log.kv_total == lg.get("kv_total", {})
    # the summary line's K + V is the per-device KV buffers' sum (two-decimal MiB)
    if "k_mib" in log.kv_total and log.kv_mib:
        total = log.kv_total["k_mib"] + log.kv_total["v_mib"]
        assert total == pytest.approx(sum(log.kv_mib.values()), abs=0.02)


def test_llamacpp_corpus_is_sourced():
    """Each case names its page (or the index id of a repository file shown without a path),
    its GPU, the build whose rules apply and how it was known, and the lines it was read from."""
    assert len(CPP) >= 18
    assert len({c["case_id"] for c in CPP}) == len(CPP)
    for c in CPP:
        assert c["engine"] == "llamacpp"
        assert c["source_url"] or "index id" in c["caveats"], c["case_id"]
        assert c["gpu"] and c["gpu_model"] and c["version_basis"]
        assert isinstance(c["build"], int)
        assert "KV buffer size" in c["verbatim_excerpt"] or "MiB" in c["verbatim_excerpt"]
        assert (
            c["config"]
            or c.get("hparams")
            or "print_info" in c["config_basis"]
            or ("print_meta" in c["config_basis"])
        )


def test_llamacpp_predictions_meet_the_bars():
    """The adapter against every llama.cpp log: KV cells and the KV buffer of every device
    exact; compute buffers within 10 % (bars at today's result)."""
    from engine_cases import predict_llamacpp

    results = [predict_llamacpp(c) for c in CPP]
    cells = [r.cells == r.cells_logged for r in results if r.cells_logged]
    assert (sum(cells), len(cells)) == (15, 15)
    assert sum(r.kv_exact for r in results) == len(results) == 18
    gpu = [abs(e) <= 0.10 for r in results for k, e in r.compute_errors().items() if k != "host"]
    host = [abs(e) <= 0.10 for r in results for k, e in r.compute_errors().items() if k == "host"]
    assert (sum(gpu), len(gpu)) == (20, 23)
    assert (sum(host), len(host)) == (10, 12)
    assert [r.predicted_fail for r in results if r.failed] == [True, True]
    assert not any(r.predicted_fail for r in results if not r.failed)


def test_llamacpp_context_cells_follow_the_build():
    """llama.cpp's KV cells from -c (src/llama-context.cpp, src/llama-kv-cache.cpp): before PR
    #17046 padded to 256 with flash attention and 32 without; from it to 256, per sequence
    when the cache is not unified."""

    def cells(args, version):
        return context_cells(options_from_args(args, version=version), args["ctx_size"])

    assert cells({"ctx_size": 16000, "flash_attn": "off"}, "b2400") == 16000  # 500 x 32
    assert cells({"ctx_size": 16001, "flash_attn": "off"}, "b2400") == 16032
    assert cells({"ctx_size": 16001, "flash_attn": "on"}, "b4500") == 16128  # 63 x 256
    assert cells({"ctx_size": 16001}, "b5000") == 16032  # flash attention off by default then
    assert cells({"ctx_size": 16001}, "b7200") == 16128
    # -np 3 without --kv-unified: three streams of pad(10000 / 3, 256) = 3584 cells
    assert cells({"ctx_size": 10000, "n_parallel": 3}, "b7200") == 3 * 3584
    assert cells({"ctx_size": 10000, "n_parallel": 3, "kv_unified": True}, "b7200") == 10240
    # -c unset: the training context, except common.h's 4,096 between ~b4400 and ~b7000
    # (the b4010 CI log runs pythia at its 2048, the b5398 log Qwen3-0.6B at 4096 of 40960)
    assert requested_context(options_from_args({}, version="b4010"), 2048) == 2048
    assert requested_context(options_from_args({}, version="b5398"), 40960) == 4096
    assert requested_context(options_from_args({}, version="b7200"), 40960) == 40960


def test_llamacpp_layer_split_of_two_gpus():
    """33 layers (32 + output) on two equal GPUs: x = il / 33 < 0.5 → GPU0 holds layers 0-16,
    so 17 of 32 KV layers (the Mixtral log: 1062.50 and 937.50 MiB of 2000)."""
    splits = split_points((), 2)
    on0 = [il for il in range(32) if layer_device(il, 32, 33, splits) == 0]
    assert on0 == list(range(17))
    assert 2000 * 17 / 32 == 1062.5


def test_llamacpp_row_split_keeps_each_layers_kv_on_its_device():
    """--split-mode row splits the matrices by rows, but each layer's KV cache stays on the
    layer's own device (b5605, llama.cpp#14075: 81 layers on 4 GPUs → 21, 20, 20, 19 KV
    layers); builds before the backend-registry loader kept it on --main-gpu."""
    cfg = config_for("meta-llama/Llama-3.1-70B")
    arch = architecture_from_config(cfg)
    f16 = get_precision("fp16", for_kv=True)
    per_layer = 2048 * 2 * 8 * 128 * 2  # cells × (K, V) × KV heads × head dim × 2 bytes

    def kv(version):
        args = {"split_mode": "row", "gpus": 4, "ctx_size": 2048, "flash_attn": "on"}
        o = options_from_args(args, version=version)
        return [d.kv for d in cpp_kv_layout(arch, o, (f16, f16), 2048, 81).devices[:-1]]

    assert kv("b5605") == [21 * per_layer, 20 * per_layer, 20 * per_layer, 19 * per_layer]
    assert kv("b3500") == [80 * per_layer, 0, 0, 0]


def _r1_v0(version: str, engine: str = "v0"):
    args = {"tensor_parallel_size": 8, "max_model_len": 8192, "vllm_engine": engine}
    return engine_serve(
        config_for("deepseek-ai/DeepSeek-R1"), "h200", engine="vllm", args=args, version=version
    ).bill


def test_v0_mla_keeps_absorbed_matrices_and_aligned_entries():
    """V0's MLA backend in 0.7 (attention/backends/mla/utils.py): beside the raw projections it
    keeps W_Q_UK [q_lora, N·L] and W_UV_O [N·L, H] re-quantised to the checkpoint's block fp8,
    the W_QR rope slice and the dequantised kv_b_proj in bf16 (N = 128 / 8 heads, L = 512), and
    pads each MLA cache entry (576 bf16) to 256 bytes (every V0 release from 0.7); 0.8 holds
    no absorbed matrices and V1 no padding. Expected bytes derived here from DeepSeek-R1's
    shapes."""
    n, lat, q, h, rope, nope_v = 128 // 8, 512, 1536, 7168, 64, 128 + 128
    fp8 = sum(e + -(-e // 16384) * 4 for e in (q * n * lat, n * lat * h))  # block-128 scales
    per_layer = fp8 + q * n * rope * 2 + lat * n * nope_v * 2
    old, new = _r1_v0("0.7.3"), _r1_v0("0.8.5")
    extra = old.item("weights").bytes - new.item("weights").bytes
    assert extra == 61 * per_layer
    assert old.kv_bytes_per_token == 61 * 1280
    assert _r1_v0("0.8.5", "v1").kv_bytes_per_token == 61 * 576 * 2
