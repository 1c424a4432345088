"""Weights from anywhere, safely (issue 9 item 2).

Every format is written here from one model; each must load into a fresh model with logits
identical to the original's.  Pickled objects beyond tensors and argparse.Namespace are refused,
naming the global, unless trusted (a harmless marker file shows whether the pickle's code ran).
"""
import argparse
import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from rsmooth import RsmoothError
from rsmooth.cli import main
from rsmooth.engine import load_model, read_checkpoint
from rsmooth.models import create_model

X = torch.rand(5, 1, 8, 8, generator=torch.Generator().manual_seed(0))


@pytest.fixture(scope="module")
def source():
    torch.manual_seed(123)
    model = create_model("digits_cnn", "digits").eval()
    with torch.no_grad():
        return model.state_dict(), model(X)


def _bare(sd):
    """The net's own keys, as a model saved without rsmooth's normalisation layer has them."""
    return {k[2:]: v for k, v in sd.items() if k.startswith("1.")}


FORMATS = {
    "plain": lambda sd: sd,
    "state_dict": lambda sd: {"state_dict": sd, "epoch": 3, "arch": "digits_cnn"},
    "model": lambda sd: {"model": sd, "optimizer": {"lr": 0.1}},
    "net": lambda sd: {"net": _bare(sd), "epoch": 7},  # MACER
    "bare": _bare,
    "dataparallel": lambda sd: {"state_dict": {"module." + k: v for k, v in sd.items()}},
    "module-after-1": lambda sd: {"state_dict": {k.replace("1.", "1.module.", 1): v for k, v in sd.items()}},
    "ddp-bare": lambda sd: {"net": {"module." + k: v for k, v in _bare(sd).items()}},
    "namespace": lambda sd: {"args": argparse.Namespace(arch="digits_cnn", lr=0.1, noise_sd=0.25),
                             "state_dict": sd},
}


def _logits(path, **kw):
    loaded = load_model(path, dataset="digits", **kw)
    with torch.no_grad():
        return loaded.model.eval()(X)


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_each_torch_format_loads_with_identical_logits(tmp_path, source, fmt):
    sd, expected = source
    p = tmp_path / f"{fmt}.pt"
    torch.save(FORMATS[fmt](sd), p)
    torch.manual_seed(999)  # the fresh model's own init differs from the source's
    assert not torch.equal(create_model("digits_cnn", "digits")(X), expected)
    assert torch.equal(_logits(p), expected)


def test_safetensors_loads_with_identical_logits_and_its_metadata(tmp_path, source):
    sd, expected = source
    p = tmp_path / "w.safetensors"
    save_file(dict(sd), str(p), metadata={"arch": "digits_cnn", "dataset": "digits"})
    assert torch.equal(_logits(p), expected)
    loaded = load_model(p)  # the dataset comes from the metadata
    assert (loaded.dataset, loaded.arch) == ("digits", "digits_cnn")
    bare = tmp_path / "bare.safetensors"
    save_file(_bare(sd), str(bare))
    assert torch.equal(_logits(bare), expected)
    with pytest.raises(RsmoothError, match="pass --dataset"):
        load_model(bare)
    junk = tmp_path / "junk.safetensors"
    junk.write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00not json at all!")
    with pytest.raises(RsmoothError, match="not a valid .safetensors file"):
        read_checkpoint(junk)


def test_namespace_is_kept(tmp_path, source):
    p = tmp_path / "ns.pt"
    torch.save(FORMATS["namespace"](source[0]), p)
    assert read_checkpoint(p)["args"] == argparse.Namespace(arch="digits_cnn", lr=0.1, noise_sd=0.25)


MARKER = {}


def _touch(path):
    """What a hostile pickle would run; here it only creates a file."""
    Path(path).touch()
    return "ran"


class _Hostile:
    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (_touch, (self.marker,))


def _hostile(tmp_path, sd):
    marker = tmp_path / "marker"
    p = tmp_path / "hostile.pt"
    torch.save({"state_dict": sd, "extra": _Hostile(marker)}, p)
    return p, marker


def test_hostile_pickle_runs_only_when_trusted(tmp_path, source):
    p, marker = _hostile(tmp_path, source[0])
    with pytest.raises(RsmoothError) as err:
        load_model(p, dataset="digits")
    message = str(err.value)
    assert f"{__name__}._touch" in message and "--trust-pickle" in message
    assert "\n" not in message and not marker.exists()
    with pytest.warns(UserWarning, match=r"unpickling checkpoint .*_touch"):
        logits = _logits(p, trust_pickle=True)
    assert marker.exists() and torch.equal(logits, source[1])


def test_missing_and_unexpected_keys_are_named(tmp_path, source):
    sd = dict(source[0])
    del sd["1.fc2.bias"]
    sd["1.fc3.weight"] = torch.zeros(2, 2)
    p = tmp_path / "mismatch.pt"
    torch.save({"state_dict": sd}, p)
    with pytest.raises(RsmoothError, match=r"missing keys 1\.fc2\.bias; unexpected keys 1\.fc3\.weight"):
        load_model(p, dataset="digits")
    extra = {**source[0], **{f"1.head{i}.weight": torch.zeros(1) for i in range(5)}}
    torch.save(extra, p)
    with pytest.raises(RsmoothError, match=r"unexpected keys 1\.head0\.weight, 1\.head1\.weight, "
                                           r"1\.head2\.weight, \.\.\. \(5 in all\)"):
        load_model(p, dataset="digits")


def _certify(tmp_path, checkpoint, *extra):
    out = tmp_path / f"c{len(list(tmp_path.glob('c*.tsv')))}.tsv"
    code = main(["certify", "--checkpoint", str(checkpoint), "--sigma", "0.25", "--n0", "10", "--n", "50",
                 "--max", "2", "--out", str(out), *extra])
    return code, out


def test_cli_certifies_safetensors_and_guards_pickles(tmp_path, source, capsys):
    sd, _ = source
    st = tmp_path / "w.safetensors"
    save_file(dict(sd), str(st), metadata={"dataset": "digits"})
    code, out = _certify(tmp_path, st)
    assert code == 0 and len(out.read_text().splitlines()) == 3
    assert json.loads(Path(f"{out}.json").read_text())["arch"] == "digits_cnn"

    p, marker = _hostile(tmp_path, sd)
    capsys.readouterr()
    code, out = _certify(tmp_path, p, "--dataset", "digits")
    err = capsys.readouterr().err
    assert code == 2 and not marker.exists() and not out.exists()
    assert err.startswith("rsmooth: error: ") and "_touch" in err and "--trust-pickle" in err
    code, out = _certify(tmp_path, p, "--dataset", "digits", "--trust-pickle")
    err = capsys.readouterr().err
    assert code == 0 and marker.exists() and "rsmooth: warning: unpickling checkpoint" in err
    assert len(out.read_text().splitlines()) == 3



@pytest.mark.parametrize("command,small", [("predict", ["--n", "10", "--max", "1"]),
                                           ("targets", ["--num-samples", "2"])])
def test_every_checkpoint_reader_guards_pickles(tmp_path, source, capsys, command, small):
    p, marker = _hostile(tmp_path, source[0])
    args = [command, "--checkpoint", str(p), "--dataset", "digits", "--sigma", "0.25",
            "--out", str(tmp_path / "o"), *small]
    assert main(args) == 2 and not marker.exists()
    assert "--trust-pickle" in capsys.readouterr().err
    assert main([*args, "--trust-pickle"]) == 0
    assert marker.exists() and "rsmooth: warning: unpickling" in capsys.readouterr().err
