"""Bad input gets one clear line on stderr and a non-zero exit, never a traceback."""

import json

import pytest

from gpuplan.cli.main import main


def run(capsys, *args):
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def assert_one_line_error(code, err, *fragments):
    assert code != 0
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


@pytest.mark.parametrize(
    ("args", "fragments"),
    [
        (["serve", "llama-3.1-7b"], ["unknown model", "did you mean", "llama-3.1-8b"]),
        (["serve", "llama-3.1-8b", "--gpu", "h1000"], ["unknown gpu", "did you mean", "h100"]),
        (["serve", "llama-3.1-8b", "--dtype", "bf61"], ["unknown precision", "did you mean"]),
        (["serve", "llama-3.1-8b", "--kv-dtype", "int4"], ["not a KV-cache dtype"]),
        (["serve", "llama-3.1-8b", "--context", "0"], ["context must be"]),
        (["serve", "llama-3.1-8b", "--users", "-3"], ["users must be"]),
        (["serve", "llama-3.1-8b", "--gpu-memory", "-1GB"], ["size"]),
        (["serve", "llama-3.1-8b", "--gpu-memory", "eighty"], ["cannot read"]),
        (["serve", "llama-3.1-8b", "--headroom", "0"], ["headroom must be in (0, 1]"]),
        (["serve", "llama-3.1-8b", "--headroom", "1.5"], ["headroom must be in (0, 1]"]),
        (
            ["serve", "llama-3.1-8b", "--tp", "3"],
            ["llama-3.1-8b: tp=3 does not divide 32 attention heads"],
        ),
        (["serve", "llama-3.1-8b", "--gpus", "3"], ["tp=3 does not divide"]),
        (["serve", "llama-3.1-8b", "--gpus", "many"], ["--gpus"]),
        (["serve", "llama-3.1-8b", "--pp", "99"], ["pp=99 is larger than the 32 layers"]),
        (["serve", "llama-3.1-8b", "--contxt", "5"], ["No such option"]),
        (["serve"], ["Missing argument"]),
        (["serve", "./nowhere/config.json"], ["no such file"]),
    ],
)
def test_bad_input(capsys, args, fragments):
    code, out, err = run(capsys, *args)
    assert_one_line_error(code, err, *fragments)
    assert out == ""


def test_malformed_config_json(capsys, tmp_path):
    path = tmp_path / "config.json"
    path.write_text('{"hidden_size": 4096,,}')
    code, _, err = run(capsys, "serve", str(path))
    assert_one_line_error(code, err, "not valid JSON")


def test_config_json_that_is_not_an_object(capsys, tmp_path):
    path = tmp_path / "config.json"
    path.write_text("[1, 2, 3]")
    code, _, err = run(capsys, "serve", str(path))
    assert_one_line_error(code, err, "must be a JSON object")


def test_partial_config_names_the_missing_keys(capsys, tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "llama", "hidden_size": 4096}))
    code, _, err = run(capsys, "serve", str(path))
    assert_one_line_error(
        code, err, "missing", "num_hidden_layers", "num_attention_heads", "vocab_size"
    )


def test_negative_sizes_in_config(capsys, tmp_path):
    path = tmp_path / "config.json"
    path.write_text(
        json.dumps(
            {
                "model_type": "llama",
                "hidden_size": -8,
                "num_hidden_layers": 2,
                "num_attention_heads": 2,
                "vocab_size": 100,
                "intermediate_size": 64,
            }
        )
    )
    code, _, err = run(capsys, "serve", str(path))
    assert_one_line_error(code, err, "hidden_size")


def test_directory_without_config(capsys, tmp_path):
    code, _, err = run(capsys, "serve", str(tmp_path))
    assert_one_line_error(code, err, "no config.json")


def test_model_directory_with_config_is_accepted(capsys, tmp_path):
    (tmp_path / "config.json").write_text(
        json.dumps(
            {
                "model_type": "llama",
                "hidden_size": 256,
                "num_hidden_layers": 2,
                "num_attention_heads": 4,
                "num_key_value_heads": 2,
                "vocab_size": 1000,
                "intermediate_size": 512,
            }
        )
    )
    code, out, err = run(capsys, "serve", str(tmp_path), "--json")
    assert code == 0, err
    assert json.loads(out)["fits"] is True


def test_unsupported_quantization(capsys, tmp_path):
    path = tmp_path / "config.json"
    cfg = {
        "model_type": "llama",
        "hidden_size": 256,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "vocab_size": 1000,
        "intermediate_size": 512,
        "quantization_config": {"quant_method": "weird"},
    }
    path.write_text(json.dumps(cfg))
    code, _, err = run(capsys, "serve", str(path))
    assert_one_line_error(code, err, "quantization method 'weird' is not supported")


def test_tp_must_split_kv_heads_evenly(capsys):
    # phi-4: 40 attention heads, 10 KV heads; tp=4 divides the heads but not the KV heads, and
    # 4 KV-head replicas would not divide 10 either (vLLM's QKVParallelLinear refuses it)
    code, _, err = run(capsys, "serve", "phi-4", "--tp", "4")
    assert_one_line_error(code, err, "tp=4 and 10 KV heads: neither divides the other")
