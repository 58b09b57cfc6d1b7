"""scripts/gpu/make_build.py writes every vllm fault into a second build of vLLM: each patch's
line is found inside the function its fault names (not another copy of the same line in
another function of the file), a fault with several patches in one file gets all of them, and
a line that is not there exactly once is one line and exit 2, with no build left behind.

The site is fake: small `vllm/...py` files generated from FAULTS themselves, each `old` line in
a function of its patch's qualname, with a decoy copy of every line in a module function and
in a sibling method, so the test needs no vLLM and follows FAULTS as faults are added."""
import ast
import importlib.util
from pathlib import Path

import pytest

from mrbench.contract import BadInput
from mrbench.harness.run.targets.vllm.faults import FAULTS, SourcePatch

ROOT = Path(__file__).resolve().parents[2]
DECOY = "mrbench_decoy"


def _make_build():
    spec = importlib.util.spec_from_file_location("make_build",
                                                  ROOT / "scripts" / "gpu" / "make_build.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


MB = _make_build()


def _rel(p: SourcePatch) -> str:
    return "/".join(p.module.split(".")[1:]) + ".py"


def _embed(line: str) -> list[str]:
    """`line` as statements that parse on their own: a block opener gets a body, an open
    call its closing parenthesis, an argument its enclosing tuple."""
    if line.endswith(":"):
        return [line, "    pass"]
    if line.endswith("("):
        return [line, ")"]
    if line.endswith(","):
        return ["_ = (", "    " + line, ")"]
    return [line]


def _body(lines: list[str], indent: str) -> str:
    out = [indent + s for ln in lines for s in _embed(ln)] or [indent + "pass"]
    return "\n".join(out) + "\n"


def _module_text(functions: dict[str, list[str]], everything: list[str]) -> str:
    """A module defining each qualname ("Class.method" or "function") with its lines, and
    the decoys: `everything` (every line meant for the file) again in a module function and
    in a method beside each patched one."""
    text = f"def {DECOY}():\n" + _body(everything, "    ") + "\n\n"
    classes: dict[str, dict[str, list[str]]] = {}
    for qualname, lines in functions.items():
        *owner, name = qualname.split(".")
        if owner:
            assert len(owner) == 1, qualname          # no fault names a nested class yet
            classes.setdefault(owner[0], {})[name] = lines
        else:   # decorated, as the Triton kernels are: the decorator is only parsed
            text += f"@triton.jit\ndef {name}(x):\n" + _body(lines, "    ") + "\n\n"
    for cls, methods in classes.items():
        text += f"class {cls}:\n"
        text += f"    def {DECOY}(self):\n" + _body(everything, "        ") + "\n"
        for name, lines in methods.items():
            text += f"    def {name}(self):\n" + _body(lines, "        ") + "\n"
        text += "\n"
    return text


def _site(root: Path, drop: tuple[str, str] | None = None,
          twice: tuple[str, str] | None = None) -> Path:
    """A fake site whose vllm/ holds every fault's lines: (qualname, old) `drop` is left out
    of its function (its decoys stay), `twice` stands in its function two times."""
    files: dict[str, dict[str, list[str]]] = {}
    decoys: dict[str, list[str]] = {}
    for f in FAULTS.values():
        for p in f.patches:
            lines = files.setdefault(_rel(p), {}).setdefault(p.qualname, [])
            decoy = decoys.setdefault(_rel(p), [])
            if p.old not in decoy:
                decoy.append(p.old)
            if p.old not in lines and (p.qualname, p.old) != drop:
                lines.append(p.old)
            if (p.qualname, p.old) == twice:
                lines.append(p.old)
    (root / "vllm").mkdir(parents=True)
    (root / "vllm" / "__init__.py").write_text("")
    for rel, functions in files.items():
        path = root / "vllm" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(_module_text(functions, decoys[rel]))
    return root


def _segment(text: str, qualname: str) -> str:
    start, end = MB.function_lines(text, qualname)
    return "".join(text.splitlines(True)[start:end])


def _decoys(text: str) -> dict[str, str]:
    tree = ast.parse(text)
    out = {DECOY: _segment(text, DECOY)}
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            out[f"{node.name}.{DECOY}"] = _segment(text, f"{node.name}.{DECOY}")
    return out


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    return _site(tmp_path_factory.mktemp("site"))


@pytest.mark.parametrize("name", sorted(FAULTS))
def test_every_fault_builds_with_its_lines_in_its_functions_only(site, tmp_path, name, capsys):
    dest = tmp_path / "build"
    assert MB.main([str(site), str(dest), "--fault", name]) == 0
    assert f"with {name} (PR {FAULTS[name].pr}) written back" in capsys.readouterr().out
    patches = FAULTS[name].patches
    for rel in {_rel(p) for p in patches}:
        built = dest / "vllm" / rel
        assert built.is_file() and not built.is_symlink(), rel      # a copy, not the link
        before, after = (site / "vllm" / rel).read_text(), built.read_text()
        compile(after, rel, "exec")
        assert _decoys(after) == _decoys(before), "a decoy copy of a line was edited"
        for p in (p for p in patches if _rel(p) == rel):
            fn = [ln.strip() for ln in _segment(after, p.qualname).splitlines()]
            for line in (ln.strip() for ln in p.new.splitlines() if ln.strip()):
                assert fn.count(line) == 1, (p.qualname, line)
            if p.old.strip() not in (ln.strip() for ln in p.new.splitlines()):
                assert p.old.strip() not in fn, (p.qualname, p.old)
    untouched = site / "vllm" / "__init__.py"
    assert (dest / "vllm" / "__init__.py").resolve() == untouched.resolve()


def test_faults_include_one_with_two_patches_in_one_file():
    by_file = {}
    for f in FAULTS.values():
        for p in f.patches:
            by_file.setdefault((f.name, _rel(p)), []).append(p)
    assert any(len(ps) > 1 for ps in by_file.values()), "no fault patches one file twice"


def test_no_fault_is_the_same_code_in_another_place(site, tmp_path):
    dest = tmp_path / "clean"
    assert MB.main([str(site), str(dest)]) == 0
    files = [p for p in (dest / "vllm").rglob("*.py")]
    assert files and all(p.is_symlink() for p in files)


def _one_patch() -> tuple[str, SourcePatch]:
    name = "mirror-increment" if "mirror-increment" in FAULTS else sorted(FAULTS)[0]
    return name, FAULTS[name].patches[0]


def test_a_line_only_in_another_function_is_refused(tmp_path, capsys):
    name, p = _one_patch()
    site = _site(tmp_path / "site", drop=(p.qualname, p.old))
    with pytest.raises(BadInput, match="found 0 times"):
        MB.fault_edits(site / "vllm", name)
    dest = tmp_path / "build"
    assert MB.main([str(site), str(dest), "--fault", name]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and p.qualname in err, err
    assert not dest.exists()


def test_a_line_twice_in_its_function_is_refused(tmp_path):
    name, p = _one_patch()
    site = _site(tmp_path / "site", twice=(p.qualname, p.old))
    with pytest.raises(BadInput, match="found 2 times"):
        MB.fault_edits(site / "vllm", name)


def test_a_function_the_file_does_not_define_is_refused(tmp_path):
    name, p = _one_patch()
    site = _site(tmp_path / "site")
    path = site / "vllm" / _rel(p)
    fn = p.qualname.split(".")[-1]
    path.write_text(path.read_text().replace(f"def {fn}(", f"def {fn}_renamed("))
    with pytest.raises(BadInput, match="defined 0 times"):
        MB.fault_edits(site / "vllm", name)


def test_a_missing_file_is_refused(tmp_path):
    name, p = _one_patch()
    site = _site(tmp_path / "site")
    (site / "vllm" / _rel(p)).unlink()
    with pytest.raises(BadInput, match="does not exist"):
        MB.fault_edits(site / "vllm", name)
