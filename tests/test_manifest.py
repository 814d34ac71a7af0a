"""Manifest building from real training-file formats written with torch.save, and bad input."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from eagle3_top.tracer.analysis.manifest import ManifestError, load_manifest, write_manifest  # noqa: E402
from eagle3_top.tracer.analysis.manifest_build import build_manifest  # noqa: E402
from eagle3_top.tracer.analysis.trainfiles import TrainFileError, load_sample  # noqa: E402
from eagle3_top.tracer.serving.fingerprint import fingerprint_now  # noqa: E402

H = 32
SCALES = (0.05, 3.0, 12.0)


def _draft_dir(tmp_path, ids=(-1, 2, 5), nested=True) -> str:
    d = tmp_path / "draft"
    d.mkdir(exist_ok=True)
    cfg = {
        "architectures": ["LlamaForCausalLMEagle3"],
        "hidden_size": H,
        "draft_vocab_size": 48,
        "vocab_size": 64,
    }
    if nested:
        cfg["eagle_config"] = {"eagle_aux_hidden_state_layer_ids": list(ids), "use_aux_hidden_state": True}
    else:
        cfg["eagle_aux_hidden_state_layer_ids"] = list(ids)
    (d / "config.json").write_text(json.dumps(cfg))
    hot = np.sort(np.random.default_rng(0).choice(64, 48, replace=False))
    torch.save(
        {"d2t": torch.tensor(hot - np.arange(48)), "t2d": torch.zeros(64, dtype=torch.bool)},
        d / "vocab_mapping.pt",
    )
    return str(d)


def _target_cfg(tmp_path) -> str:
    p = tmp_path / "target.json"
    p.write_text(
        json.dumps(
            {
                "architectures": ["LlamaForCausalLM"],
                "num_hidden_layers": 8,
                "hidden_size": H,
                "vocab_size": 64,
            }
        )
    )
    return str(p)


def _aux(seq: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    parts = [(torch.randn(1, H, generator=g) + 0.3 * torch.randn(seq, H, generator=g)) * s for s in SCALES]
    return torch.cat(parts, -1)


def _write_specforge(root, n: int = 6, seq: int = 20, pad: int = 4, gz: bool = False) -> list[torch.Tensor]:
    auxes = []
    for i in range(n):
        d = root / f"rows_{(i // 4) * 4}-{(i // 4) * 4 + 4}"
        d.mkdir(parents=True, exist_ok=True)
        aux = _aux(seq, i)
        ids = torch.randint(1, 64, (seq,))
        sample = {
            "input_ids": torch.cat([ids, torch.zeros(pad, dtype=torch.long)]),
            "loss_mask": torch.cat([torch.ones(seq, dtype=torch.long), torch.zeros(pad, dtype=torch.long)]),
            "hidden_state": torch.randn(1, seq + pad, H).to(torch.bfloat16),
            "aux_hidden_state": torch.cat([aux, torch.zeros(pad, 3 * H)]).unsqueeze(0).to(torch.bfloat16),
        }
        path = d / f"data_{i}.ckpt"
        if gz:
            with gzip.open(str(path) + ".gz", "wb") as f:
                torch.save(sample, f)
        else:
            torch.save(sample, path)
        auxes.append(aux.to(torch.bfloat16))
    return auxes


def test_specforge_files_give_reference_fingerprints_and_probes(tmp_path) -> None:
    data = tmp_path / "hidden_states"
    auxes = _write_specforge(data)
    metrics = tmp_path / "metrics.json"
    metrics.write_text(json.dumps({"train/acc_0": 0.8, "train/acc_1": 0.6, "train/acc_2": 0.5}))
    m = build_manifest(
        draft_dir=_draft_dir(tmp_path),
        data=str(data),
        target_config=_target_cfg(tmp_path),
        metrics=str(metrics),
    )
    assert m.aux.concat_order == [-1, 2, 5]
    assert m.aux.slots == 3 and m.aux.slot_width == H
    assert m.reference.files == 6 and m.reference.tokens == 6 * 20  # padding dropped
    direct = fingerprint_now(torch.cat(auxes), 3)
    np.testing.assert_allclose(m.reference.fingerprint.rms, direct.rms, rtol=1e-5)
    np.testing.assert_allclose(m.reference.fingerprint.sketch, direct.sketch, rtol=1e-4, atol=1e-6)
    assert len(m.probes) == 4 and len(m.probes[0].input_ids) == 20
    assert m.training.acc == [0.8, 0.6, 0.5]
    assert m.training.simulated_acc_len == pytest.approx(0.8 + 0.48 + 0.24)
    assert m.vocab.size == 48 and m.vocab.max_target < 64
    out = tmp_path / "m.json"
    write_manifest(m, str(out))
    assert load_manifest(str(out)).concat_order == [-1, 2, 5]


def test_gzip_and_legacy_formats(tmp_path) -> None:
    data = tmp_path / "gz"
    _write_specforge(data, n=2, gz=True)
    s = load_sample(str(next(data.rglob("*.ckpt.gz"))))
    assert s.fmt == "specforge" and s.aux.shape == (20, 3 * H)
    legacy = tmp_path / "legacy"
    legacy.mkdir()
    aux = _aux(10, 1)
    torch.save(
        {"input_ids": torch.randint(1, 64, (10,)), "hidden_states": list(aux.split(H, -1))}, legacy / "s0.pt"
    )
    m = build_manifest(draft_dir=_draft_dir(tmp_path), data=str(legacy))
    assert m.reference.tokens == 10
    np.testing.assert_allclose(m.reference.fingerprint.rms, fingerprint_now(aux, 3).rms, rtol=1e-5)


def test_ids_missing_falls_back_to_specforge_default_with_target_config(tmp_path) -> None:
    draft = tmp_path / "d2"
    draft.mkdir()
    (draft / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLMEagle3"]}))
    data = tmp_path / "hs"
    _write_specforge(data, n=1)
    m = build_manifest(draft_dir=str(draft), data=str(data), target_config=_target_cfg(tmp_path))
    assert m.aux.layer_ids == [1, 3, 4] and m.aux.ids_source == "specforge_default"
    with pytest.raises(ManifestError, match="no eagle_aux_hidden_state_layer_ids"):
        build_manifest(draft_dir=str(draft), data=str(data))


class Evil:
    def __reduce__(self):
        return (os.system, ("echo pwned > /tmp/eagle3-top-pwned",))


@pytest.mark.parametrize("case", ["empty", "other_format", "pickle", "truncated", "wrong_width"])
def test_bad_training_input_is_one_clear_line_and_writes_nothing(tmp_path, case) -> None:
    data = tmp_path / "data"
    data.mkdir()
    if case == "other_format":
        torch.save({"weights": torch.randn(3, 3)}, data / "data_0.ckpt")
    elif case == "pickle":
        import pickle

        (data / "data_0.ckpt").write_bytes(pickle.dumps({"input_ids": Evil()}))
    elif case == "truncated":
        _write_specforge(data, n=1)
        f = next(data.rglob("*.ckpt"))
        f.write_bytes(f.read_bytes()[:200])
    elif case == "wrong_width":
        torch.save(
            {
                "input_ids": torch.arange(1, 5),
                "loss_mask": torch.ones(4),
                "hidden_state": torch.randn(1, 4, H),
                "aux_hidden_state": torch.randn(1, 4, 2 * H + 1),
            },
            data / "data_0.ckpt",
        )
    out = tmp_path / "m.json"
    r = subprocess.run(
        [sys.executable, "-m", "eagle3_top.tui.cli", "manifest", "build", "--draft", _draft_dir(tmp_path),
         "--data", str(data), "--out", str(out)],
        capture_output=True, text=True,
    )  # fmt: skip
    assert r.returncode == 2, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("eagle3-top: "), r.stderr
    assert not out.exists()
    assert not os.path.exists("/tmp/eagle3-top-pwned")
    expected = {
        "empty": "no training files",
        "other_format": "not a hidden-state file",
        "pickle": "refused to unpickle",
        "truncated": "not a readable torch file",
        "wrong_width": "not 3 slots",
    }[case]
    assert expected in lines[0]


@pytest.mark.parametrize(
    "content, reason",
    [
        ({"eagle3_top_manifest": 2}, "manifest version 2"),
        ({"hello": 1}, "not an eagle3-top manifest"),
        ({"eagle3_top_manifest": 1, "aux": {}}, "aux.concat_order: missing"),
    ],
)
def test_wrong_manifest_files(tmp_path, content, reason) -> None:
    p = tmp_path / "m.json"
    p.write_text(json.dumps(content))
    with pytest.raises(ManifestError, match=reason):
        load_manifest(str(p))
    p.write_text("{not json")
    with pytest.raises(ManifestError, match="not valid JSON"):
        load_manifest(str(p))


def test_missing_config_without_eagle_config(tmp_path) -> None:
    with pytest.raises(ManifestError, match="not found"):
        build_manifest(draft_dir=str(tmp_path / "nope"), data=str(tmp_path))
    with pytest.raises(TrainFileError, match="no such file"):
        build_manifest(draft_dir=_draft_dir(tmp_path), data=str(tmp_path / "missing"))


# -- the README's walkthrough: gen-data, then manifest build with every input --------------------

CLI = [sys.executable, "-m", "eagle3_top.tui.cli"]


def test_gen_data_layers_take_negative_lists_and_the_walkthrough_builds(tmp_path) -> None:
    from eagle3_top.hooks.toy import paths

    data = tmp_path / "hs"
    r = subprocess.run(
        [*CLI, "toy", "gen-data", "--out", str(data), "--num-samples", "2", "--new-tokens", "8",
         "--layers", "-1,2,5"],
        capture_output=True, text=True,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "layers [-1, 2, 5]" in r.stdout
    out = tmp_path / "m.json"
    r = subprocess.run(
        [*CLI, "manifest", "build", "--draft", paths.draft_dir(), "--data", str(data),
         "--target-config", paths.target_dir(),
         "--metrics", os.path.join(paths.draft_dir(), "training_metrics.json"), "-o", str(out)],
        capture_output=True, text=True, preexec_fn=lambda: os.umask(0o022),
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert os.stat(out).st_mode & 0o777 == 0o644  # the umask's, not mkstemp's 0600
    m = load_manifest(str(out))
    assert m.target.num_layers == 8 and m.training is not None and len(m.training.acc) == 3
    assert sorted(os.listdir(tmp_path)) == ["hs", "m.json"]


@pytest.mark.parametrize(
    "argv, expected",
    [
        (["--out", "d", "--layers", "-1,2,5"], ["--out", "d", "--layers=-1,2,5"]),
        (["--layers", "-1"], ["--layers=-1"]),
        (["--layers", "-1, 2"], ["--layers=-1, 2"]),
        (["--layers", "2,5"], ["--layers", "2,5"]),
        (["--layers", "--out", "d"], ["--layers", "--out", "d"]),
        (["--", "--layers", "-1"], ["--", "--layers", "-1"]),
    ],
)
def test_negative_layer_lists_are_attached_to_their_option(argv, expected) -> None:
    from eagle3_top.hooks.toy.gendata import attach_list_values

    assert attach_list_values(argv) == expected


@pytest.mark.parametrize("value, layers", [("-1,2,5", [-1, 2, 5]), ("-1", [-1]), ("3,-1", [3, -1])])
def test_gen_data_parses_negative_layer_lists(value, layers) -> None:
    from eagle3_top.hooks.toy.gendata import attach_list_values, build_parser

    assert build_parser().parse_args(attach_list_values(["--out", "d", "--layers", value])).layers == layers


def test_gen_data_help_imports_no_torch() -> None:
    code = (
        "import sys\n"
        "from eagle3_top.hooks.toy_main import main\n"
        "try:\n    main(['gen-data', '--help'])\nexcept SystemExit as e:\n    assert e.code == 0\n"
        "assert 'torch' not in sys.modules, 'torch imported for --help'\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "--layers" in r.stdout


def test_gen_data_default_layers_are_what_the_draft_was_trained_on() -> None:
    from eagle3_top.hooks.toy.gendata import DEFAULT_LAYERS
    from eagle3_top.hooks.toy.train import AUX_IDS

    assert AUX_IDS == list(DEFAULT_LAYERS) == [-1, 2, 5]
    cfg = json.load(
        open(os.path.join(os.path.dirname(__file__), "..", "hooks/toy/weights/draft/config.json"))
    )
    assert cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == AUX_IDS
