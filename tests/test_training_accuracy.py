"""The training bill against published, measured memory peaks (tests/data/training_measurements).

bench/training_accuracy.py prints every case; this test holds today's result as the bar, overall
and per framework (issue 21's goal is ≥ 80 cases, median ≤ 5 %, ≥ 90 % within 10 %):

- all: 95 sourced cases, median |error| 1.9 %, 91 within 10 % (96 %: the goal is met);
- megatron 14 (2.4 %, 14), torchtitan 19 (4.2 %, 18), torchtune 9 (4.8 %, 8);
- hf-trainer 53 (0.2 %, 51 within 10 %): HF Trainer + PEFT + TRL runs from fms-acceleration's
  benchmark, with FSDP1's kept root unit, transformers 4.46-4.49's shifted-logits copy,
  GPTBigCode's training KV cache and the QLoRA fp32 residual streams modelled; the 2-GPU
  Llama-2-70B QLoRA rows (-23 %) miss.
"""

from __future__ import annotations

from collections import Counter, defaultdict

from training_cases import FIGURES, evaluate, load_cases, median_abs_error

MIN_CASES = 95
MEDIAN_BAR = 0.020
WITHIN_10 = 91
# framework: (cases, median |error| bar, cases within 10 %): today's figures, medians rounded up
# to the next 0.1 %
FRAMEWORK_BARS = {
    "hf-trainer": (53, 0.003, 51),
    "megatron": (14, 0.025, 14),
    "torchtitan": (19, 0.042, 18),
    "torchtune": (9, 0.048, 8),
}


def test_every_case_is_sourced_and_names_its_figure():
    cases = load_cases()
    assert len(cases) >= MIN_CASES
    assert len({c.id for c in cases}) == len(cases)
    frameworks = Counter(c.framework for c in cases)
    assert len(frameworks) >= 4 and min(frameworks.values()) >= 5, frameworks
    for c in cases:
        assert c.source.startswith(("https://", "NVIDIA/")), c.id
        assert c.setup and c.figure in FIGURES and c.measured > 0, c.id


def test_median_error_holds_the_bar():
    results = evaluate()
    assert len(results) >= MIN_CASES
    assert median_abs_error(results) <= MEDIAN_BAR
    assert sum(abs(r.error) <= 0.10 for r in results) >= WITHIN_10


def test_each_framework_holds_its_bar():
    by_framework = defaultdict(list)
    for r in evaluate():
        by_framework[r.case.framework].append(r)
    for name, (cases, median_bar, within) in FRAMEWORK_BARS.items():
        rs = by_framework[name]
        assert len(rs) >= cases, name
        assert median_abs_error(rs) <= median_bar, (name, median_abs_error(rs))
        assert sum(abs(r.error) <= 0.10 for r in rs) >= within, name
