"""The README and docs/ as a reader finds them: the README short, with the two commands on its
first screen and an index of every docs/ page; every relative link and anchor resolves; every
test, bench script and example the text names exists; no sentence on two pages (one page per
subject); examples/README.md lists exactly the files in examples/.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))
EXAMPLES_README = ROOT / "examples" / "README.md"
PAGES = [README, *DOCS, EXAMPLES_README]
#: Generated from the API model by crdgen (`make crds`); its text is the model's descriptions.
GENERATED = {ROOT / "docs" / "api.md"}
#: A terminal's first screen.
FIRST_SCREEN_LINES = 24
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)
CODE = re.compile(r"`[^`\n]*`")


def prose(path: Path) -> str:
    """The text without code blocks and code spans (a regex in backticks is no link)."""
    return CODE.sub("", FENCE.sub("", path.read_text(encoding="utf-8")))


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation but '-' and '_' dropped, spaces to '-'."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    text = FENCE.sub("", path.read_text(encoding="utf-8"))
    return {slug(line.lstrip("#")) for line in text.splitlines() if line.startswith("#")}


def links(path: Path) -> list[str]:
    return [target for target in LINK.findall(prose(path)) if not re.match(r"[a-z]+:", target)]


def test_the_readme_is_short_and_its_first_screen_shows_the_two_commands_and_what_they_do() -> None:
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 200
    first = lines[:FIRST_SCREEN_LINES]
    for command in ("make demo", "make test"):
        (line,) = [line for line in first if line.startswith(command)]
        assert "#" in line and len(line.split("#", 1)[1].strip()) > 20, line  # what it does


def broken_links(path: Path) -> list[str]:
    broken = []
    for target in links(path):
        file, _, anchor = target.partition("#")
        resolved = (path.parent / file).resolve() if file else path
        if not resolved.exists():
            broken.append(target)
        elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
            broken.append(target)
    return broken


@pytest.mark.parametrize("path", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_and_anchor_resolves(path: Path) -> None:
    assert broken_links(path) == []


def test_a_missing_page_or_heading_is_a_broken_link(tmp_path: Path) -> None:
    (tmp_path / "other.md").write_text("# Other\n\n## A section\n", encoding="utf-8")
    page = tmp_path / "page.md"
    page.write_text("# Page\n\n[ok](other.md#a-section) [gone](missing.md) [no heading](other.md#b) "
                    "[here](#page) [not here](#nowhere) `[code](not-a-link.md)` [web](https://x.org/y)\n",
                    encoding="utf-8")
    assert broken_links(page) == ["missing.md", "other.md#b", "#nowhere"]


def test_the_slug_matches_githubs_anchors() -> None:
    assert slug("Multi-node replicas (LeaderWorkerSet)") == "multi-node-replicas-leaderworkerset"
    assert slug("The API: `AscendLLMDeployment`") == "the-api-ascendllmdeployment"
    assert slug("Operator at scale (`bench/operator_scale.py`)") == "operator-at-scale-benchoperator_scalepy"


def test_the_readme_indexes_every_docs_page() -> None:
    linked = {(ROOT / target.partition("#")[0]).resolve() for target in links(README)}
    assert [p.name for p in DOCS if p.resolve() not in linked] == []


@pytest.mark.parametrize("path", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_test_and_bench_script_the_text_names_exists(path: Path) -> None:
    named = set(re.findall(r"\b((?:tests|bench)/[\w/]+\.py)\b", path.read_text(encoding="utf-8")))
    assert sorted(name for name in named if not (ROOT / name).exists()) == []


def sentences(path: Path) -> set[str]:
    found = set()
    for paragraph in re.split(r"\n\s*\n", prose(path)):
        text = " ".join(line for line in paragraph.splitlines() if not line.startswith("#"))
        text = re.sub(r"\s+", " ", text)
        found |= {s.strip() for s in re.split(r"(?<=[.:;])\s+(?=[A-Z*(])", text) if len(s.strip()) >= 80}
    return found


def repeated_sentences(paths: list[Path]) -> list[tuple[str, str, str]]:
    seen: dict[str, Path] = {}
    twice = []
    for path in paths:
        for sentence in sentences(path):
            if sentence in seen:
                twice.append((seen[sentence].name, path.name, sentence[:100]))
            seen.setdefault(sentence, path)
    return twice


def test_no_sentence_is_on_two_pages() -> None:
    assert repeated_sentences([p for p in PAGES if p not in GENERATED]) == []


def test_a_sentence_on_two_pages_is_found(tmp_path: Path) -> None:
    said = "The operator applies every child with one server-side apply, and a resync writes nothing at all."
    (tmp_path / "a.md").write_text(f"# A\n\n{said} Short one.\n", encoding="utf-8")
    (tmp_path / "b.md").write_text(f"# B\n\nFirst a sentence of its own. {said}\n", encoding="utf-8")
    assert repeated_sentences([tmp_path / "a.md", tmp_path / "b.md"]) == [("a.md", "b.md", said[:100])]


def test_examples_readme_lists_exactly_the_examples() -> None:
    listed = set(re.findall(r"^\| `([\w.-]+\.yaml)` \|", EXAMPLES_README.read_text(encoding="utf-8"), re.M))
    assert listed == {p.name for p in (ROOT / "examples").glob("*.yaml")}


def test_the_readmes_example_is_the_example_file() -> None:
    text = README.read_text(encoding="utf-8")
    (name,) = re.findall(r"^`(examples/[\w.-]+\.yaml)`, ", text, re.M)
    (block,) = re.findall(r"^```yaml\n(.*?)^```", text, re.S | re.M)
    assert block == (ROOT / name).read_text(encoding="utf-8")


def section(text: str, heading: str) -> str:
    """The text under ``heading`` up to the next heading of the same or a higher level."""
    level = heading.split(" ", 1)[0]
    start = text.index(heading + "\n") + len(heading)
    rest = text[start:]
    ends = [m.start() for m in re.finditer(r"^#{1,%d} " % len(level), rest, re.M)]
    return rest[: ends[0]] if ends else rest


def test_the_readmes_disaggregation_paragraph_leads_to_the_drawn_path_the_npu_limits_and_the_cpu_bench() -> None:
    """What the README states in brief is where it links: the request path drawn with both legs,
    RDMA, HCCS and the transfer engine's ports under what only an NPU can confirm, and the CPU bench."""
    (paragraph,) = [p for p in README.read_text(encoding="utf-8").split("\n\n")
                    if p.startswith("**Prefill/decode disaggregation**")]
    targets = LINK.findall(paragraph)
    assert "docs/kv-transfer.md#routing-specrouting-with-disaggregation" in targets
    kv = (ROOT / "docs" / "kv-transfer.md").read_text(encoding="utf-8")
    (drawing,) = re.findall(r"^```\n(.*?)^```", section(kv, "### Routing (`spec.routing` with disaggregation)"),
                            re.S | re.M)
    assert "prefill leg" in drawing and "decode leg" in drawing and "pulls the KV" in drawing
    npu = section(kv, "### What only an NPU can confirm")
    assert all(word in npu for word in ("RDMA", "HCCS", "random ports"))
    (bench_link,) = [t for t in targets if t.startswith("bench/README.md#")]
    bench = (ROOT / "bench" / "README.md").read_text(encoding="utf-8")
    (heading,) = [line for line in bench.splitlines() if line.startswith("## ") and slug(line[3:]) ==
                  bench_link.partition("#")[2]]
    body = section(bench, heading)
    assert "CPU" in heading and "`bench/pd_latency.py`" in heading and "TTFT" in body and "ITL" in body
    assert "NIXL" in paragraph and "ExampleConnector" in paragraph  # the connectors tests/engine/test_pd_cpu.py runs
    # The README draws the path too: both legs, and what each engine does with the KV.
    (own,) = re.findall(r"^```\n(.*?)^```", paragraph + "\n", re.S | re.M)
    assert all(word in own for word in ("prefill leg", "decode leg", "kv_producer", "kv_consumer", "pulls the KV"))
    assert "`spec.kvOffload`" in paragraph and "refused at admission" in paragraph
