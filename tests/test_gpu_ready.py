"""GPU readiness: the hot loops never make the device wait, noise is drawn on the device, and
only engine/checkpoint.py and engine/distributed.py choose a device.

A CUDA device runs ahead of the Python that queues its work until the host needs a value: a
tensor read into Python (``.item()``, ``float``/``int``/``bool`` of a tensor, ``.tolist()``,
``.cpu()``, ``.numpy()``), a shape that depends on values (``nonzero``, boolean-mask indexing,
``masked_select``, ``unique``), or a tensor built from host data (``torch.tensor(3.0,
device="cuda")`` copies from the host and waits).  On the CPU these are cheap, so the tests
count them with a dispatch mode (every aten op passes through it) and wrappers on the
conversion methods: one training step of every method must make none, CERTIFY and PREDICT a
fixed number per input whatever the number of forward passes, ``count_votes`` (a targets block)
one, and the certify and targets drivers as many per example (per block) whatever n.  On a CUDA
machine the same tests also run on the GPU under
``torch.cuda.set_sync_debug_mode("warn")``, which reports every wait the device really makes.
"""
import ast
import collections
import contextlib
import warnings
from pathlib import Path
from unittest import mock

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from conftest import trained_module
from rsmooth.engine import TrainConfig, run_certification, train
from rsmooth.engine.targets import compute_targets
from rsmooth.methods import METHODS, Batch, StepContext, create_method
from rsmooth.methods.base import hyperparameters
from rsmooth.models import create_model
from rsmooth.smoothing import Smooth

SRC = Path(__file__).resolve().parents[1] / "src" / "rsmooth"
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])

#: the ways Python reads a tensor (recorded by name, without underscores)
_CONVERSIONS = ("item", "__bool__", "__int__", "__float__", "__index__", "tolist", "cpu", "numpy")
#: aten ops that read a value to the host from C++ (e.g. a range check), make a tensor from host
#: data (lift_fresh: ``torch.tensor(3.0, device=...)``) or have a shape that depends on values
_OPS = {"_local_scalar_dense", "lift_fresh", "nonzero", "masked_select", "_unique2", "unique_dim",
        "unique_consecutive"}


def _value_dependent(func, args, kwargs) -> bool:
    """x[mask], x[mask] = v and repeat_interleave by a tensor of unknown total: shapes from values."""
    name = func.overloadpacket.__name__
    if name in ("index", "index_put", "index_put_", "_index_put_impl_"):
        return any(isinstance(i, torch.Tensor) and i.dtype in (torch.bool, torch.uint8) for i in args[1])
    return name == "repeat_interleave" and func._overloadname == "Tensor" and kwargs.get("output_size") is None


class _Ops(TorchDispatchMode):
    """Records the ops of ``_OPS`` and the value-dependent ones (outside a recorded conversion)."""

    def __init__(self, events, inside):
        super().__init__()
        self.events, self.inside = events, inside

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if not self.inside and (func.overloadpacket.__name__ in _OPS or _value_dependent(func, args, kwargs)):
            self.events.append(func.overloadpacket.__name__)
        return func(*args, **kwargs)


@contextlib.contextmanager
def host_reads():
    """Yield the list of host reads made inside the block: conversions by name, aten ops by name
    (the dispatch mode misses the C++ reads of ``_local_scalar_dense`` under inference mode: the
    conversions are wrapped for that), and "cuda-sync" for each wait that CUDA's sync debug mode
    reports when there is a GPU."""
    events, inside = [], []
    originals = {name: getattr(torch.Tensor, name) for name in _CONVERSIONS}

    def counting(name):
        def wrapper(self, *args, **kwargs):
            if not inside:
                events.append(name.strip("_"))
            inside.append(name)
            try:
                return originals[name](self, *args, **kwargs)
            finally:
                inside.pop()
        return wrapper

    cuda = torch.cuda.is_available()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for name in _CONVERSIONS:
            setattr(torch.Tensor, name, counting(name))
        if cuda:
            torch.cuda.set_sync_debug_mode("warn")
        try:
            with _Ops(events, inside):
                yield events
        finally:
            if cuda:
                torch.cuda.set_sync_debug_mode("default")
            for name, method in originals.items():
                setattr(torch.Tensor, name, method)
    events += ["cuda-sync" for w in caught if "synchroniz" in str(w.message)]


# -- training: one step of every method ----------------------------------------------------------

#: small settings of each method (fast), and the variants whose step takes another path
_SMALL = {"num_noise": 2, "num_steps": 2, "warmup": 0}
_VARIANTS = [(name, {}) for name in METHODS] + [
    ("smoothadv", {"attack": "ddn"}), ("smoothadv", {"lbd": 1.0}), ("smoothmix", {"mix_step": 1, "eps": 0.5}),
    ("catrs", {"target": "smoothed", "confidence_mask": True}), ("catrs", {"target": "hard", "high": "mean"}),
    ("catrs-v1", {"mask": False}), ("macer", {"deferred": True}),
]


def _method(name, extra):
    known = {f.name for f in hyperparameters(METHODS.get(name))}
    return create_method(name, **{k: v for k, v in {**_SMALL, **extra}.items() if k in known})


@pytest.mark.slow
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name, extra", _VARIANTS, ids=lambda v: v if isinstance(v, str) else
                         ",".join(f"{k}={x}" for k, x in v.items()) or "default")
def test_a_training_step_never_waits_for_the_device(name, extra, device):
    """Loss (attacks, MACER's sampling, CAT-RS's K+ and noise search), backward and SGD step."""
    torch.manual_seed(0)
    model = create_model("cifar_resnet20", "cifar10").to(device).train()
    method = _method(name, extra)
    model = trained_module(method, model, 3)
    x, y = torch.rand(4, 3, 32, 32, device=device), torch.tensor([0, 1, 2, 3], device=device)
    targets = torch.softmax(torch.randn(4, 10, device=device), 1)
    batch = Batch(x, y, torch.arange(4, device=device), {"targets": targets})
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=1e-4)
    gen = torch.Generator(device=device)
    # CUDA's own waits are not counted in step 0: a process's first use of a CUDA op (cuBLAS or
    # cuDNN handles, lazy module loading) may wait once, as the first CUDA test of an H100 run
    # showed; step 2 runs with the optimiser's momentum buffers
    for step in range(3):
        gen.manual_seed(step)
        with host_reads() as events:
            opt.zero_grad(set_to_none=True)
            loss, stats = method.loss(model, batch, StepContext(gen, epoch=1, num_epochs=3, step=step, lr_drop_epoch=1))
            loss.backward()
            opt.step()
        waits = [e for e in events if not (step == 0 and e == "cuda-sync")]
        assert waits == [], f"{name} step {step} made the host wait for the device: {waits}"
        assert all(isinstance(v, torch.Tensor) and v.device == loss.device for v in stats.values())


def test_the_counter_sees_each_kind_of_wait():
    """The guard itself: every kind of host read it claims to see is seen."""
    x = torch.randn(6)
    with host_reads() as events:
        x.sum().item(), float(x[0]), int(x.argmax()), bool(x[0] > 0), x.tolist(), x.cpu(), x.numpy()
        x[x > 0], x.nonzero(), torch.tensor(2.0), x.unique(), x.repeat_interleave(torch.tensor([1] * 6))
        x.new_full((), 2.0), x * 2.0, x.repeat_interleave(2)  # none of these waits
        with torch.inference_mode():
            int(x.sum()), x[x > 0]
        torch.nn.functional.one_hot(torch.arange(3), 3)  # C++ reads: one_hot checks the range off CUDA
    assert events == ["item", "float", "int", "bool", "tolist", "cpu", "numpy", "index", "nonzero", "lift_fresh",
                      "_unique2", "lift_fresh", "repeat_interleave", "int", "index"] + ["_local_scalar_dense"] * 2


# -- certification and targets: a fixed number of waits per input ------------------------------

@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("mode", [{}, {"precision": "bf16", "channels_last": True}], ids=["fp32", "bf16"])
def test_certify_waits_once_per_input_whatever_n(device, mode):
    """CERTIFY queues the n0 and the n samples back to back and reads the counts once; PREDICT too."""
    torch.manual_seed(0)
    smooth = Smooth(create_model("digits_cnn", "digits").to(device), 10, 0.25, **mode)
    x = torch.rand(1, 8, 8)  # on the host, as the certify driver reads it from the dataset
    smooth.certify(x, 8, 8, 0.001, 4)  # warm up: the one-off check of the model on this input shape
    seen = {}
    for n in (16, 64):  # 4 and 16 forward passes of 4 noisy inputs (+ 2 for n0)
        gen = torch.Generator(device=device).manual_seed(0)
        with host_reads() as seen[n, "certify"]:
            smooth.certify(x, 8, n, 0.001, 4, generator=gen)
        with host_reads() as seen[n, "predict"]:
            smooth.predict(x, n, 0.001, 4, generator=gen)
    # the input's range and finiteness check (one read of its min and max), then one copy of the counts to the host
    expected = ["tolist", "cpu", "numpy"] + (["cuda-sync"] if device == "cuda" else [])
    assert {k: sorted(v) for k, v in seen.items()} == {k: sorted(expected) for k in seen}


@pytest.mark.parametrize("device", DEVICES)
def test_count_votes_waits_once_per_call(device):
    """A targets block: B images x num noisy samples, one wait for the device, at the end."""
    torch.manual_seed(0)
    smooth = Smooth(create_model("digits_cnn", "digits").to(device), 10, 0.25)
    xs = torch.rand(6, 1, 8, 8)
    smooth.count_votes(xs, 4, 4)  # warm up
    for num, batch_size in ((8, 4), (40, 4), (4, 16)):  # one image per pass, or several per pass
        with host_reads() as events:
            counts = smooth.count_votes(xs, num, batch_size, generator=torch.Generator(device=device))
        # the input's finiteness check (on the host copy), the count of non-finite logits
        assert sorted(events) == sorted(["tolist", "int"] + (["cuda-sync"] if device == "cuda" else []))
        assert counts.device.type == device and counts.sum().item() == 6 * num


@pytest.fixture(scope="module")
def digits_model(tmp_path_factory):
    out = tmp_path_factory.mktemp("digits")
    train(TrainConfig(dataset="digits", epochs=1), out, progress=False, log=lambda s: None)
    return out


def _certify_reads(model, out, **kw):
    # the estimate line's timed passes (once a run, each waiting for its pass: as many as fit in their
    # time) are not the run's reads
    with host_reads() as events, mock.patch("rsmooth.engine.certify.sample_rate", return_value=1000.0):
        run_certification(str(model), str(out), n0=8, batch_size=4, progress=False, log=lambda s: None, **kw)
    return collections.Counter(events)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("mode", ["certify", "predict"])
def test_the_certify_driver_reads_per_example_not_per_forward_pass(digits_model, tmp_path, mode, device):
    """1 and 3 examples at n = 16 and n = 64 (4 and 16 forward passes each): each example adds
    the same reads, whatever n: its label and finiteness check on the host, one copy of its counts."""
    _certify_reads(digits_model, tmp_path / "warm-up.tsv", mode=mode, n=16, max=1, device=device)
    runs = {(n, m): _certify_reads(digits_model, tmp_path / f"{n}-{m}.tsv", mode=mode, n=n, max=m, device=device)
            for n in (16, 64) for m in (1, 3)}
    assert runs[16, 1] == runs[64, 1] and runs[16, 3] == runs[64, 3]
    two_more = {"int": 2, "tolist": 2, "cpu": 2, "numpy": 2, **({"cuda-sync": 2} if device == "cuda" else {})}
    assert runs[16, 3] - runs[16, 1] == two_more


def _targets_reads(model, out, num, device):
    with host_reads() as events:
        compute_targets(str(model), str(out), num_samples=num, batch_size=8, device=device, stop_after_blocks=1,
                        progress=False, log=lambda s: None)
    return collections.Counter(events)


@pytest.mark.slow
@pytest.mark.parametrize("device", DEVICES)
def test_the_targets_driver_reads_per_block_not_per_forward_pass(digits_model, tmp_path, device):
    """One block of 256 training images at 8 and 16 noisy samples each: the same reads."""
    _targets_reads(digits_model, tmp_path / "warm-up.npy", 8, device)
    assert _targets_reads(digits_model, tmp_path / "8.npy", 8, device) == \
        _targets_reads(digits_model, tmp_path / "16.npy", 16, device)


# -- noise on the device, device choice in one place --------------------------------------------

#: random draws that make a new tensor: need generator= and device= (else: on the CPU, from the global stream)
_FACTORIES = {"randn", "rand", "randint", "normal", "bernoulli", "multinomial", "poisson"}
#: in-place draws (on the tensor's own device): need generator=
_IN_PLACE = {"normal_", "uniform_", "bernoulli_", "random_", "exponential_", "geometric_", "cauchy_",
             "log_normal_"}
#: host-side on purpose: the data order of an epoch (the data are read on the host)
_HOST_DRAWS = {("engine/train.py", "randperm")}


def _calls(path: Path):
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call) and isinstance(node.func, (ast.Attribute, ast.Name)):
            name = node.func.attr if isinstance(node.func, ast.Attribute) else node.func.id
            on_torch = isinstance(node.func, ast.Attribute) and ast.unparse(node.func.value) == "torch"
            yield node, name, on_torch, {k.arg for k in node.keywords}


def test_every_random_draw_names_its_generator_and_device():
    """torch's factories need generator= and device=; in-place draws a generator; draws through
    a helper (``draw(...)``, a step context's ``ctx.randn(...)``) a device (a noise's
    ``noise.draw(out, x, generator)`` draws into ``out``, on its device)."""
    bad = []
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC).as_posix()
        for node, name, on_torch, kw in _calls(path):
            factory = name in _FACTORIES or name == "randperm" or name.endswith("_like") and name[:-5] in _FACTORIES
            if on_torch and factory:
                host = (rel, name) in _HOST_DRAWS or name.endswith("_like")  # *_like: the device of its input
                need = {"generator"} if host else {"generator", "device"}
            elif name in _IN_PLACE:
                need = {"generator"}
            elif name == "draw" and isinstance(node.func, ast.Name) or name in ("randn", "rand") and not on_torch:
                need = {"device"}
            else:
                continue
            if not need <= kw:
                bad.append(f"{rel}:{node.lineno} {name} without {', '.join(sorted(need - kw))}")
    assert bad == [], "\n".join(bad)


#: the modules that choose a device (``--device``, torchrun's LOCAL_RANK) and join a process group
_DEVICE_OWNERS = {"engine/checkpoint.py", "engine/distributed.py"}


@pytest.mark.slow
def test_only_the_engine_chooses_a_device():
    """No ``.cuda()``, ``torch.cuda.is_available()``/``set_device``/``device_count`` or
    ``torch.device("cuda...")`` elsewhere: library code takes the device from the model or input."""
    bad = []
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC).as_posix()
        if rel in _DEVICE_OWNERS:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            text = ast.unparse(node) if isinstance(node, (ast.Call, ast.Attribute)) else ""
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "cuda"
                    or isinstance(node, ast.Attribute) and text in ("torch.cuda.is_available", "torch.cuda.set_device",
                                                                   "torch.cuda.device_count")
                    or isinstance(node, ast.Call) and text.startswith(("torch.device('cuda", 'torch.device("cuda'))):
                bad.append(f"{rel}:{node.lineno} {text}")
    assert bad == [], "\n".join(bad)
