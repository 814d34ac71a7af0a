"""Hostile and broken inputs to the commands that read files: one line on stderr, exit code 2, no
traceback, never torch's advice to load with ``weights_only=False``, and nothing half-written."""

from __future__ import annotations

import gzip
import io
import json
import os
import pickle
import zipfile

import numpy as np
import pytest
from eagle3_top.tracer.analysis import manifest as manifest_mod
from eagle3_top.tui.cli import main

torch = pytest.importorskip("torch")

H = 16


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _one_line(code: int, err: str, *words: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code == 2, err
    assert len(lines) == 1, err
    assert "Traceback" not in err and "weights_only=False" not in err and "safe_globals" not in err, err
    for w in words:
        assert w in lines[0], lines[0]
    return lines[0]


# -- a manifest to break ---------------------------------------------------------------------------


def _manifest_body() -> dict:
    rng = np.random.default_rng(3)
    rows = rng.standard_normal((4, 3 * H)).astype("<f2")
    return {
        "eagle3_top_manifest": 1,
        "created": "2026-01-01T00:00:00Z",
        "target": {"arch": "LlamaForCausalLM", "num_layers": 8, "hidden_size": H, "vocab_size": 64},
        "draft": {"arch": "LlamaForCausalLMEagle3", "draft_vocab_size": 48, "norm_before_fc": False},
        "aux": {"layer_ids": [-1, 2, 5], "concat_order": [-1, 2, 5], "slots": 3, "slot_width": H},
        "reference": {
            "files": 2,
            "tokens": 40,
            "fingerprint": {
                "rows": 40,
                "slots": 3,
                "slot_width": H,
                "mean": [0.01, 0.2, -0.3],
                "rms": [0.06, 3.1, 11.8],
                "sketch": rng.standard_normal((3, 16)).round(4).tolist(),
            },
        },
        "probes": [
            {
                "source": "rows_0-4/data_0.ckpt",
                "input_ids": [5, 9, 11, 3],
                "aux_rows": {"dtype": "<f2", "shape": [4, 3 * H], "b64": _b64(rows.tobytes())},
            }
        ],
        "vocab": {"size": 48, "min_target": 0, "max_target": 63, "unique_targets": 48, "source": "x.pt"},
        "training": {"acc": [0.8, 0.7, 0.6], "simulated_acc_len": 1.7},
    }


def _b64(raw: bytes) -> str:
    import base64

    return base64.b64encode(raw).decode()


def test_the_unbroken_manifest_loads(tmp_path, capsys) -> None:
    p = tmp_path / "m.json"
    p.write_text(json.dumps(_manifest_body()))
    code, out, err = _run(capsys, "manifest", "show", str(p))
    assert code == 0, err
    assert "slots x width          3 x 16" in out and "probes: 1 samples" in out


def _set(body: dict, dotted: str, value) -> dict:
    node = body
    keys = dotted.split(".")
    for k in keys[:-1]:
        node = node[int(k)] if isinstance(node, list) else node[k]
    last = keys[-1]
    if isinstance(node, list):
        node[int(last)] = value
    else:
        node[last] = value
    return body


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("aux.concat_order.2", "x", 'aux.concat_order[2]: expected an integer, got "x"'),
        (
            "aux.concat_order",
            [-1, 2, 5000],
            "aux.concat_order[2]: expected an integer in [-1, 1023], got 5000",
        ),
        ("aux.slot_width", 0, "aux.slot_width: expected an integer in [1, "),
        ("aux.slot_width", 12.5, "aux.slot_width: expected an integer, got 12.5"),
        ("aux.slots", 4, "aux.slots: 4, but aux.concat_order lists 3 layers"),
        ("aux", [1, 2], "aux: expected an object, got a list of 2"),
        ("target.num_layers", -3, "target.num_layers: expected an integer in [0, 1024], got -3"),
        ("target.arch", 7, "target.arch: expected a string, got 7"),
        ("draft.hidden_size", "big", 'draft.hidden_size: expected an integer, got "big"'),
        ("draft.norm_before_fc", "yes", 'draft.norm_before_fc: expected true or false, got "yes"'),
        ("draft.eagle_config", [1], "draft.eagle_config: expected an object, got a list of 1"),
        ("reference.fingerprint.rms", [1.0, "a", 2.0], "reference.fingerprint: "),
        (
            "reference.fingerprint.sketch",
            [[0.1] * 5] * 3,
            "reference.fingerprint.sketch: expected 16 numbers",
        ),
        ("reference.tokens", -1, "reference.tokens: expected an integer in [0, "),
        ("probes.0.input_ids.1", -4, "probes[0].input_ids[1]: expected an integer in [0, "),
        ("probes.0.aux_rows.b64", "!!!not base64", "probes[0].aux_rows.b64: not valid base64"),
        (
            "probes.0.aux_rows.shape",
            [4, 3 * H + 1],
            "probes[0].aux_rows.shape: [4, 49]: rows of 49, expected 48",
        ),
        ("probes.0.aux_rows.dtype", "|O", 'probes[0].aux_rows.dtype: expected "<f2" or "<f4", got "|O"'),
        ("vocab.all_zero", "no", 'vocab.all_zero: expected true or false, got "no"'),
        ("training.acc.0", 97.5, "training.acc[0]: expected a number in [0, 1], got 97.5"),
        ("training.acc", "high", 'training.acc: expected a list, got "high"'),
        ("created", 20260101, "created: expected a string, got 20260101"),
        ("eagle3_top_manifest", True, "manifest version true; this eagle3-top reads version 1"),
    ],
)
def test_a_field_of_the_wrong_type_is_named(tmp_path, capsys, field, value, message) -> None:
    p = tmp_path / "m.json"
    p.write_text(json.dumps(_set(_manifest_body(), field, value)))
    code, _, err = _run(capsys, "manifest", "show", str(p))
    line = _one_line(code, err, message)
    assert line.startswith(f"eagle3-top: {p}: "), line


@pytest.mark.parametrize("token", ["Infinity", "-Infinity", "NaN", "1e400"])
def test_non_finite_numbers_are_refused(tmp_path, capsys, token) -> None:
    text = json.dumps(_manifest_body()).replace('"rms": [0.06,', f'"rms": [{token},')
    assert token in text
    p = tmp_path / "m.json"
    p.write_text(text)
    code, _, err = _run(capsys, "manifest", "show", str(p))
    _one_line(code, err, "manifest is not valid:", "finite" if token != "1e400" else "overflows a double")


@pytest.mark.parametrize("depth", [65, 100_000])
def test_deep_nesting_is_refused(tmp_path, capsys, depth) -> None:
    body = json.dumps(_manifest_body())
    p = tmp_path / "m.json"
    p.write_text(body[:-1] + ', "x": ' + "[" * depth + "]" * depth + "}")
    code, _, err = _run(capsys, "manifest", "show", str(p))
    _one_line(code, err, "nested more than 64 levels deep")


def test_two_hundred_thousand_slots_are_refused_at_once(tmp_path, capsys) -> None:
    n = 200_000
    body = _manifest_body()
    body["aux"] = {"layer_ids": list(range(n)), "concat_order": list(range(n)), "slot_width": 8}
    fp = body["reference"]["fingerprint"]
    fp.update(slots=n, mean=[0.1] * n, rms=[1.0] * n, sketch=[[0.1] * 16] * n)
    p = tmp_path / "m.json"
    p.write_text(json.dumps(body))
    code, _, err = _run(capsys, "manifest", "show", str(p))
    _one_line(code, err, "aux.concat_order: expected 1 to 1024 entries, got 200000")


def test_an_endless_or_huge_file_is_refused_by_size(capsys, tmp_path) -> None:
    code, _, err = _run(capsys, "manifest", "show", "/dev/zero")  # endless: not even opened for reading
    _one_line(code, err, "/dev/zero: cannot read the manifest: a character device, not a file")
    huge = tmp_path / "huge.json"
    with open(huge, "wb") as f:
        f.truncate(65 << 20)  # sparse: 65 MiB on paper, nothing on disk
    code, _, err = _run(capsys, "manifest", "show", str(huge))
    _one_line(code, err, f"{huge}: manifest is larger than 64 MiB")


@pytest.mark.parametrize(
    "raw, words",
    [
        (b'{"eagle3_top_manifest": 1, "created": "\xff\xfe"}', ("not UTF-8 text",)),
        (b'{"eagle3_top_manifest": 1, "x": 1' + b"7" * 40 + b"}", ("an integer of 41 digits",)),
        (b"[1, 2, 3]", ("must be a JSON object",)),
        (b"", ("not valid JSON",)),
    ],
)
def test_files_that_are_not_json_objects(tmp_path, capsys, raw, words) -> None:
    p = tmp_path / "m.json"
    p.write_bytes(raw)
    code, _, err = _run(capsys, "manifest", "show", str(p))
    _one_line(code, err, *words)


# -- manifest build: hostile draft and target configs --------------------------------------------


def _draft(tmp_path, **over) -> str:
    d = tmp_path / "draft"
    d.mkdir(exist_ok=True)
    cfg = {
        "architectures": ["LlamaForCausalLMEagle3"],
        "hidden_size": H,
        "draft_vocab_size": 48,
        "vocab_size": 64,
        "eagle_config": {"eagle_aux_hidden_state_layer_ids": [-1, 2, 5], "use_aux_hidden_state": True},
    }
    cfg.update(over)
    (d / "config.json").write_text(json.dumps(cfg))
    return str(d)


def _data(tmp_path, n: int = 2, seq: int = 12) -> str:
    root = tmp_path / "hs" / "rows_0-2000"
    root.mkdir(parents=True, exist_ok=True)
    g = torch.Generator().manual_seed(1)
    for i in range(n):
        aux = torch.cat([torch.randn(seq, H, generator=g) * s for s in (0.05, 3.0, 12.0)], -1)
        torch.save(
            {
                "input_ids": torch.randint(1, 64, (seq,), generator=g),
                "loss_mask": torch.ones(seq, dtype=torch.long),
                "hidden_state": torch.randn(1, seq, H, generator=g).to(torch.bfloat16),
                "aux_hidden_state": aux.unsqueeze(0).to(torch.bfloat16),
            },
            root / f"data_{i}.ckpt",
        )
    return str(tmp_path / "hs")


def _build(capsys, tmp_path, draft: str, data: str, *extra: str) -> tuple[int, str, str]:
    out = tmp_path / "out"
    out.mkdir(exist_ok=True)
    code, stdout, err = _run(
        capsys, "manifest", "build", "--draft", draft, "--data", data, "-o", str(out / "m.json"), *extra
    )
    if code != 0:
        assert os.listdir(out) == [], os.listdir(out)  # not the manifest, not a temporary file
    return code, stdout, err


def test_a_good_build_writes_a_file_of_the_umasks_mode(tmp_path, capsys) -> None:
    old = os.umask(0o022)
    try:
        code, out, err = _build(capsys, tmp_path, _draft(tmp_path), _data(tmp_path))
    finally:
        os.umask(old)
    assert code == 0, err
    m = tmp_path / "out" / "m.json"
    assert os.stat(m).st_mode & 0o777 == 0o644
    assert sorted(os.listdir(tmp_path / "out")) == ["m.json"]
    assert manifest_mod.load_manifest(str(m)).concat_order == [-1, 2, 5]


@pytest.mark.parametrize(
    "over, words",
    [
        ({"hidden_size": "big"}, ('config.json: hidden_size: expected an integer, got "big"',)),
        ({"hidden_size": 10**20}, ("hidden_size: expected an integer in [1, 2147483647]",)),
        ({"architectures": 5}, ("architectures: expected a list of strings, got 5",)),
        ({"architectures": {"0": "x"}}, ("architectures: expected a list of strings, got an object",)),
        ({"eagle_config": ["a", "b"]}, ("eagle_config: expected an object, got a list of 2",)),
        (
            {"eagle_config": {"eagle_aux_hidden_state_layer_ids": [-1, "2", 5]}},
            ('eagle_config.eagle_aux_hidden_state_layer_ids[1]: expected an integer, got "2"',),
        ),
        (
            {"eagle_config": {"eagle_aux_hidden_state_layer_ids": [-1, 2.0, 5]}},
            ("eagle_config.eagle_aux_hidden_state_layer_ids[1]: expected an integer, got 2.0",),
        ),
        (
            {"eagle_config": {"eagle_aux_hidden_state_layer_ids": []}},
            ("eagle_config.eagle_aux_hidden_state_layer_ids: expected 1 to 1024 entries, got 0",),
        ),
        (
            {"eagle_config": {"eagle_aux_hidden_state_layer_ids": {"a": 1}}},
            ("eagle_config.eagle_aux_hidden_state_layer_ids: expected a list, got an object",),
        ),
        (
            {"eagle_config": {"eagle_aux_hidden_state_layer_ids": [-1, 2, 5], "use_aux_hidden_state": "no"}},
            ('eagle_config.use_aux_hidden_state: expected true or false, got "no"',),
        ),
        ({"eagle_config": {"eagle_aux_hidden_state_layer_ids": [-1, 2, 5], "scale": float("nan")}}, ("NaN",)),
        ({"norm_before_fc": [True]}, ("norm_before_fc: expected true or false, got a list of 1",)),
    ],
)
def test_a_hostile_draft_config_is_one_line(tmp_path, capsys, over, words) -> None:
    code, _, err = _build(capsys, tmp_path, _draft(tmp_path, **over), _data(tmp_path))
    _one_line(code, err, *words)


@pytest.mark.parametrize(
    "raw, words",
    [
        (b'{"hidden_size": 16, "name": "\xc3\x28"}', ("not UTF-8 text",)),
        (
            b'{"hidden_size": 16, "x": ' + b"[" * 5000 + b"]" * 5000 + b"}",
            ("nested more than 64 levels deep",),
        ),
        (b'{"hidden_size": 1' + b"0" * 5000 + b"}", ("an integer of 5001 digits",)),
        (b'{"hidden_size": 1e400}', ("hidden_size: expected an integer, got Infinity",)),
        (b'["not", "an", "object"]', ("must be a JSON object",)),
    ],
)
def test_a_draft_config_that_is_not_json_is_one_line(tmp_path, capsys, raw, words) -> None:
    d = tmp_path / "draft"
    d.mkdir()
    (d / "config.json").write_bytes(raw)
    code, _, err = _build(capsys, tmp_path, str(d), _data(tmp_path))
    _one_line(code, err, *words)


def test_a_hundred_megabyte_config_is_refused_by_size(tmp_path, capsys) -> None:
    d = tmp_path / "draft"
    d.mkdir()
    with open(d / "config.json", "w") as f:
        f.write('{"hidden_size": 16, "pad": "')
        f.write("x" * (100 << 20))
        f.write('"}')
    code, _, err = _build(capsys, tmp_path, str(d), _data(tmp_path))
    _one_line(code, err, "draft config.json is larger than 16 MiB")


@pytest.mark.parametrize(
    "target, words",
    [
        ({"num_hidden_layers": "32"}, ('num_hidden_layers: expected an integer, got "32"',)),
        ({"num_hidden_layers": 10**9}, ("num_hidden_layers: expected an integer in [1, 1024]",)),
        ({"num_hidden_layers": 2}, ("too few for SpecForge's default layers",)),
        (
            {"num_hidden_layers": 8, "hidden_size": [16]},
            ("hidden_size: expected an integer, got a list of 1",),
        ),
    ],
)
def test_a_hostile_target_config_is_one_line(tmp_path, capsys, target, words) -> None:
    draft = _draft(tmp_path, eagle_config={"use_aux_hidden_state": True})  # ids from the target's layers
    t = tmp_path / "target.json"
    t.write_text(json.dumps(target))
    code, _, err = _build(capsys, tmp_path, draft, _data(tmp_path), "--target-config", str(t))
    _one_line(code, err, *words)


@pytest.mark.parametrize(
    "metrics, words",
    [
        ({"acc": [0.9, float("nan")]}, ("acc[1]: expected a number in [0, 1], got NaN",)),
        ({"train/acc_0": 97.0}, ("train/acc_0: expected a number in [0, 1], got 97.0",)),
        ({"simulated_acc_len": "3"}, ('simulated_acc_len: expected a number, got "3"',)),
        ({"loss": 1.0}, ("no per-position accuracy",)),
    ],
)
def test_bad_training_metrics_are_one_line(tmp_path, capsys, metrics, words) -> None:
    m = tmp_path / "metrics.json"
    m.write_text(json.dumps(metrics))
    code, _, err = _build(capsys, tmp_path, _draft(tmp_path), _data(tmp_path), "--metrics", str(m))
    _one_line(code, err, *words)


# -- manifest build: hostile training files ------------------------------------------------------


class _Evil:
    def __reduce__(self):
        return (os.system, ("echo pwned > /tmp/eagle3-top-hostile-pwned",))


def _write_bad_ckpt(path, case: str) -> None:
    seq = 6
    good = {
        "input_ids": torch.arange(1, seq + 1),
        "loss_mask": torch.ones(seq, dtype=torch.long),
        "aux_hidden_state": torch.randn(1, seq, 3 * H),
    }
    if case == "not_zip":
        path.write_bytes(b"this is not a checkpoint at all\n" * 10)
    elif case == "empty":
        path.write_bytes(b"")
    elif case == "zip_not_torch":
        with zipfile.ZipFile(path, "w") as z:
            z.writestr("archive/data.pkl", b"hello")
            z.writestr("archive/version", b"3")
    elif case == "truncated_zip":
        buf = io.BytesIO()
        torch.save(good, buf)
        path.write_bytes(buf.getvalue()[: len(buf.getvalue()) // 2])
    elif case == "numpy_inside":
        torch.save({**good, "input_ids": np.arange(1, seq + 1)}, path)
    elif case == "evil_pickle":
        path.write_bytes(pickle.dumps({"input_ids": _Evil()}))
    elif case == "evil_in_zip":
        torch.save({**good, "input_ids": _Evil()}, path)
    elif case == "bf16_ids":
        torch.save({**good, "input_ids": torch.arange(1, seq + 1).to(torch.bfloat16)}, path)
    elif case == "int_rows":
        torch.save({**good, "aux_hidden_state": torch.randint(1, 9, (1, seq, 3 * H))}, path)
    elif case == "mask_length":
        torch.save({**good, "loss_mask": torch.ones(seq + 3)}, path)
    elif case == "mask_not_tensor":
        torch.save({**good, "loss_mask": [1, 1, 1]}, path)
    elif case == "negative_ids":
        torch.save({**good, "input_ids": torch.arange(-3, seq - 3)}, path)
    elif case == "zero_width":
        torch.save({**good, "aux_hidden_state": torch.randn(1, seq, 0)}, path)
    elif case == "legacy_scalars":
        torch.save(
            {"input_ids": torch.arange(1, 4), "hidden_states": [torch.tensor(1.5), torch.tensor(2.5)]}, path
        )
    elif case == "sparse_rows":
        torch.save({**good, "aux_hidden_state": torch.randn(seq, 3 * H).to_sparse()}, path)
    else:
        raise AssertionError(case)


@pytest.mark.parametrize(
    "case, words",
    [
        ("not_zip", ("not a torch file (neither torch's zip container nor a pickle)",)),
        ("empty", ("empty file",)),
        ("zip_not_torch", ("not a readable torch file",)),
        ("truncated_zip", ("not a readable torch file",)),
        ("numpy_inside", ("refused to unpickle", "numpy", "which a weights-only load does not run")),
        ("evil_pickle", ("refused to unpickle",)),
        (
            "evil_in_zip",
            ("refused to unpickle", "references posix.system, which a weights-only load does not run"),
        ),
        ("bf16_ids", ("'input_ids' is a torch.bfloat16 tensor, expected integer token ids",)),
        ("int_rows", ("'aux_hidden_state' is a torch.int64 tensor, expected floating-point",)),
        ("mask_length", ("loss_mask has 9 positions, input_ids 6",)),
        ("mask_not_tensor", ("'loss_mask' is list, expected a tensor",)),
        ("negative_ids", ("input_ids hold -3 .. 2, not token ids",)),
        ("zero_width", ("has no columns",)),
        ("legacy_scalars", ("hidden_states[0] () has no hidden dimension",)),
        ("sparse_rows", ("expected a dense real one",)),
    ],
)
def test_a_hostile_training_file_is_one_line(tmp_path, capsys, case, words) -> None:
    data = tmp_path / "hs"
    data.mkdir()
    _write_bad_ckpt(data / "data_0.ckpt", case)
    code, _, err = _build(capsys, tmp_path, _draft(tmp_path), str(data))
    _one_line(code, err, str(data / "data_0.ckpt"), *words)
    assert not os.path.exists("/tmp/eagle3-top-hostile-pwned")


def test_a_gz_that_is_not_gzip_and_a_gzipped_non_torch_file(tmp_path, capsys) -> None:
    data = tmp_path / "hs"
    data.mkdir()
    (data / "data_0.ckpt.gz").write_bytes(b"plain bytes, no gzip header")
    code, _, err = _build(capsys, tmp_path, _draft(tmp_path), str(data))
    _one_line(code, err, "data_0.ckpt.gz: not a readable torch file")
    (data / "data_0.ckpt.gz").write_bytes(gzip.compress(b"gzip, but nothing torch wrote"))
    code, _, err = _build(capsys, tmp_path, _draft(tmp_path), str(data))
    _one_line(code, err, "data_0.ckpt.gz: not a torch file")


@pytest.mark.parametrize("content", ["garbage", "no_d2t", "float_d2t"])
def test_a_hostile_vocab_mapping_is_one_line(tmp_path, capsys, content) -> None:
    vm = tmp_path / "vocab_mapping.pt"
    if content == "garbage":
        vm.write_bytes(b"\x80\x04garbage after a pickle header")
    elif content == "no_d2t":
        torch.save({"t2d": torch.ones(4, dtype=torch.bool)}, vm)
    else:
        torch.save({"d2t": torch.randn(48)}, vm)
    code, _, err = _build(capsys, tmp_path, _draft(tmp_path), _data(tmp_path), "--vocab-mapping", str(vm))
    _one_line(code, err, str(vm))


def test_output_that_cannot_be_written(tmp_path, capsys, monkeypatch) -> None:
    draft, data = _draft(tmp_path), _data(tmp_path)
    code, _, err = _run(
        capsys, "manifest", "build", "--draft", draft, "--data", data, "-o", str(tmp_path / "no" / "m.json")
    )
    _one_line(code, err, "no such directory")
    code, _, err = _run(capsys, "manifest", "build", "--draft", draft, "--data", data, "-o", str(tmp_path))
    _one_line(code, err, "is a directory")

    def full_disk(*_a, **_k):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(manifest_mod.os, "replace", full_disk)
    code, _, err = _build(capsys, tmp_path, draft, data)
    _one_line(code, err, "cannot write the manifest: No space left on device")


def test_bad_counts_are_usage_errors(tmp_path, capsys) -> None:
    for flag, value in (("--max-files", "0"), ("--probes", "-1"), ("--max-files", "many")):
        code, _, err = _build(capsys, tmp_path, _draft(tmp_path), _data(tmp_path), flag, value)
        assert code == 2 and "Traceback" not in err and f"argument {flag}" in err, err


# -- keys ---------------------------------------------------------------------------------------


def test_keys_into_a_file_or_an_unwritable_directory(tmp_path, capsys) -> None:
    f = tmp_path / "afile"
    f.write_text("x")
    code, _, err = _run(capsys, "keys", str(f), "server")
    _one_line(code, err, f"cannot write keys in {f}: not a directory")
    if os.geteuid() != 0:
        ro = tmp_path / "ro"
        ro.mkdir()
        ro.chmod(0o500)
        code, _, err = _run(capsys, "keys", str(ro), "server")
        _one_line(code, err, "Permission denied")
        assert os.listdir(ro) == []
    else:  # root writes anywhere a mode allows; procfs takes no new files, not even from root
        code, _, err = _run(capsys, "keys", "/proc/self", "server")
        _one_line(code, err, "cannot write keys in /proc/self")


def test_keys_are_written_both_or_neither(tmp_path, capsys, monkeypatch) -> None:
    d = tmp_path / "keys"
    code, out, err = _run(capsys, "keys", str(d), "server")
    assert code == 0, err
    assert sorted(os.listdir(d)) == ["server.key", "server.key_secret"]
    assert os.stat(d / "server.key_secret").st_mode & 0o777 == 0o600

    real_replace = os.replace

    def fail_on_public(src, dst):
        if str(dst).endswith(".key"):
            raise OSError(28, "No space left on device")
        return real_replace(src, dst)

    monkeypatch.setattr(os, "replace", fail_on_public)
    code, _, err = _run(capsys, "keys", str(d), "laptop")
    _one_line(code, err, "No space left on device")
    assert sorted(os.listdir(d)) == ["server.key", "server.key_secret"]  # no laptop half, no staging dir


def test_keys_never_replace_a_pair_unless_forced(tmp_path, capsys) -> None:
    """Replacing a pair locks out every peer that trusts its public key: refused in one line, the
    old pair untouched, half a pair included; --force replaces it."""
    d = tmp_path / "keys"
    assert _run(capsys, "keys", str(d), "server")[0] == 0
    before = {p: (d / p).read_bytes() for p in ("server.key", "server.key_secret")}
    code, _, err = _run(capsys, "keys", str(d), "server")
    _one_line(code, err, "server.key exists: replacing it locks out every peer that trusts that key (--force")
    assert {p: (d / p).read_bytes() for p in before} == before and sorted(os.listdir(d)) == sorted(before)
    (d / "server.key").unlink()  # half a pair is still somebody's
    code, _, err = _run(capsys, "keys", str(d), "server")
    _one_line(code, err, "server.key_secret exists")
    code, _, err = _run(capsys, "keys", str(d), "server", "--force")
    assert code == 0, err
    assert (d / "server.key_secret").read_bytes() != before["server.key_secret"]
    assert sorted(os.listdir(d)) == ["server.key", "server.key_secret"]


@pytest.mark.parametrize("name", ["../escape", "a/b", ".", ""])
def test_keys_name_must_be_a_file_name(tmp_path, capsys, name) -> None:
    code, _, err = _run(capsys, "keys", str(tmp_path), name)
    _one_line(code, err, "use letters, digits")
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("name", ["model.pt", "model.safetensors"])
def test_hostile_draft_weights_holding_d2t_are_one_line(tmp_path, capsys, name) -> None:
    draft = _draft(tmp_path)
    path = os.path.join(draft, name)
    with open(path, "wb") as f:
        f.write(
            b"\x00\x00\x00\x00\x00\x00\x10\x00{not a header"
            if name.endswith("safetensors")
            else b"PK\x03\x04junk"
        )
    code, _, err = _build(capsys, tmp_path, draft, _data(tmp_path))
    _one_line(code, err, path)
