"""The documents stay true: README's configuration reference is the one the config table
generates, links resolve, and docs/ARCHITECTURE.md names only paths that exist and lists
every import that breaks its layer rule."""

import ast
import re
from pathlib import Path

import pytest

from kplane.broker.config.docs import render_markdown

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
ARCHITECTURE = ROOT / "docs" / "ARCHITECTURE.md"
DOCUMENTS = [README, ARCHITECTURE, ROOT / "bench" / "README.md", ROOT / "bench" / "RESULTS.md"]

PATH_TOKEN = re.compile(
    r"`((?:kplane|bench|tests|configs|docs)/[^`\s]*"
    r"|Makefile|pyproject\.toml|README\.md|Dockerfile|docker-compose\.yml)`"
)
LINK = re.compile(r"\]\(([^)\s]+)\)")
LAYER_LINE = re.compile(r"^\s*(\d+)\s+(.+)$")
TOOLS_MAY_IMPORT_FROM_SERVER = {"kplane.broker.server.kafka_server"}
PACKAGES = ("protocol", "common", "broker", "client", "spark", "tools", "testing")
"""The packages under ``kplane/``, each with its layer."""


def test_readme_config_reference_is_current() -> None:
    text = README.read_text()
    start = text.index("-->", text.index("<!-- config-reference:start")) + len("-->\n")
    end = text.index("<!-- config-reference:end -->")
    assert text[start:end] == render_markdown(), "run: python -m kplane.broker.config.docs"


def test_readme_points_into_the_repository() -> None:
    text = README.read_text()
    assert "../shared" not in text
    assert "docs/ARCHITECTURE.md" in text
    assert "bench/RESULTS.md" in text


def test_architecture_names_only_paths_that_exist() -> None:
    names = PATH_TOKEN.findall(ARCHITECTURE.read_text())
    assert len(names) > 50
    missing = sorted(
        {n for n in names if not (any(ROOT.glob(n)) if "*" in n else (ROOT / n).exists())}
    )
    assert not missing, f"docs/ARCHITECTURE.md names paths that do not exist: {missing}"


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(document: Path) -> None:
    text = document.read_text()
    broken = []
    for target in LINK.findall(text):
        if re.match(r"[a-z]+:", target):
            continue
        path, _, anchor = target.partition("#")
        linked = (document.parent / path).resolve() if path else document
        if not linked.exists():
            broken.append(target)
            continue
        if anchor and linked.suffix == ".md":
            headings = re.findall(r"^#+ (.+)$", linked.read_text(), flags=re.MULTILINE)
            if anchor not in {_slug(h) for h in headings}:
                broken.append(target)
    assert not broken, f"{document.name}: links that do not resolve: {broken}"


def test_architecture_names_the_modules_of_each_kip() -> None:
    text = ARCHITECTURE.read_text()
    section = text[text.index("## Where each KIP lives") :]
    rows = [line for line in section.splitlines() if line.startswith("| KIP-")]
    for kip in ("KIP-2,", "KIP-103", "KIP-226", "KIP-291", "KIP-899"):
        row = next((r for r in rows if kip in r.split("|")[1]), None)
        assert row is not None, f"no row for {kip}"
        entry = PATH_TOKEN.findall(row.split("|")[2])
        assert len(entry) == 1 and entry[0].endswith(".py"), row
        assert PATH_TOKEN.findall(row.split("|")[3]), f"{kip}: no other modules named"


def _layers() -> dict[str, int]:
    """Package or module path prefix ('kplane/broker/server/', 'kplane/broker/logging_setup.py')
    -> layer."""
    text = ARCHITECTURE.read_text()
    block = text[text.index("```", text.index("## Layers")) + 3 :]
    block = block[: block.index("```")]
    layers = {}
    for line in block.splitlines():
        match = LAYER_LINE.match(line)
        if match:
            for name in match.group(2).split():
                layers[name] = int(match.group(1))
    return layers


def _layer_of(path: str, layers: dict[str, int]) -> tuple[str, int] | None:
    for name, level in layers.items():
        if path == name or (name.endswith("/") and path.startswith(name)):
            return name, level
    return None


def _module_paths(module: str) -> list[str]:
    base = module.replace(".", "/")
    return [f"{base}.py", f"{base}/__init__.py", f"{base}/"]


def _imports(path: Path) -> set[str]:
    modules = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            modules.add(node.module)
        elif isinstance(node, ast.Import):
            modules.update(alias.name for alias in node.names)
    return {m for m in modules if m.split(".")[0] == "kplane"}


def _rule_breaks() -> list[tuple[str, str]]:
    layers = _layers()
    found = []
    for path in sorted(ROOT.glob("kplane/**/*.py")):
        source = path.relative_to(ROOT).as_posix()
        own = _layer_of(source, layers)
        if own is None:
            continue
        for module in _imports(path):
            target = _layer_of(_module_paths(module)[0], layers) or _layer_of(
                _module_paths(module)[2], layers
            )
            if target is None or target[0] == own[0]:
                continue
            tool_into_server = (
                own[0] == "kplane/tools/"
                and target[0] == "kplane/broker/server/"
                and module not in TOOLS_MAY_IMPORT_FROM_SERVER
            )
            client_into_broker = own[0] in ("kplane/client/", "kplane/common/") and target[
                0
            ].startswith("kplane/broker/")
            if target[1] >= own[1] or tool_into_server or client_into_broker:
                found.append((source, module))
    return found


def test_architecture_layers_cover_every_package() -> None:
    layers = _layers()
    tops = {p.name for p in (ROOT / "kplane").iterdir() if (p / "__init__.py").exists()}
    assert tops == set(PACKAGES), f"kplane/ holds {sorted(tops)}, the layers {PACKAGES}"
    packages = [p for p in (ROOT / "kplane" / "broker").iterdir() if (p / "__init__.py").exists()]
    for package in packages:
        name = f"kplane/broker/{package.name}/"
        assert name in layers, f"{name} has no layer"
    for package in PACKAGES:
        if package != "broker":
            assert f"kplane/{package}/" in layers, f"kplane/{package}/ has no layer"


def test_every_import_against_the_layers_is_listed() -> None:
    text = ARCHITECTURE.read_text()
    section = text[text.index("### Where the code breaks the rule today") :]
    section = section[: section.index("\n## ")]
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    unlisted = [
        f"{source} -> {module}"
        for source, module in _rule_breaks()
        if not any(
            f"`{source}`" in row and any(f"`{p}`" in row for p in _module_paths(module))
            for row in rows
        )
    ]
    assert not unlisted, (
        "imports against the layer rule of docs/ARCHITECTURE.md; fix the import or list it "
        f"under 'Where the code breaks the rule today': {unlisted}"
    )
