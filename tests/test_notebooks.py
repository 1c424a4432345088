"""The tutorial notebooks under docs/tutorials/ run from top to bottom, and the copies the site
renders carry the outputs of such a run (issue 27, item 2)."""
import shutil
from pathlib import Path

import pytest

from conftest import SUBPROCESS_ENV

TUTORIALS = Path(__file__).resolve().parents[1] / "docs" / "tutorials"
NOTEBOOKS = sorted(TUTORIALS.glob("*.ipynb"))


def test_the_two_tutorials_are_there():
    assert {p.stem for p in NOTEBOOKS} >= {"certify_your_model", "reproduce_a_row"}


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_committed_notebook_shows_its_outputs(path):
    """The site renders the committed notebook without running it: every code cell has run, in
    order, without an error, and printed or shown something."""
    nbformat = pytest.importorskip("nbformat")
    cells = [c for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code"]
    assert cells and [c.execution_count for c in cells] == list(range(1, len(cells) + 1))
    assert all(c.outputs for c in cells) and not any(o.output_type == "error" for c in cells for o in c.outputs)


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs(path, tmp_path, monkeypatch):
    """Executed with nbclient in a copy of docs/tutorials/, with this checkout's rsmooth; it
    writes nothing beside itself (a run in the docs tree leaves it clean: issue 37, item 14),
    only into a temporary folder of its own."""
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    for name in ("PYTHONPATH", "OMP_NUM_THREADS"):
        monkeypatch.setenv(name, SUBPROCESS_ENV[name])
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    folder = tmp_path / "tutorials"
    shutil.copytree(TUTORIALS, folder)
    before = sorted(p.relative_to(folder) for p in folder.rglob("*"))
    nb = nbformat.read(folder / path.name, as_version=4)
    nbclient.NotebookClient(nb, timeout=240, kernel_name="python3",
                            resources={"metadata": {"path": str(folder)}}).execute()
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert not any(o.output_type == "error" for o in outputs)
    assert sorted(p.relative_to(folder) for p in folder.rglob("*")) == before
    if path.stem == "certify_your_model":
        assert any("image/png" in o.get("data", {}) for o in outputs)  # the certified-accuracy plot
        (png,) = (tmp_path / "tmp").glob("rsmooth-tutorial-*/certified_accuracy_own_model.png")
        assert png.stat().st_size > 1000
