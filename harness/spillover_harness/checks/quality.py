"""Quality judges (recorded field 7), the same for simulated and real outputs.

- code-review: every planted defect is reported: a line of the output names
  its file (path or file name) and, on that line or the next two, one of the
  defect's keywords (case-insensitive). For the large input these are the
  defects near the end of the large files, which only a reader of the file sees.
- summarize: the summary mentions at least `expected.min_facts` of the facts
  planted in the last tenth of the document (each fact's `key`, e.g. a date or a
  figure, case-insensitive): the summary covers the end of the document.
An empty output never passes.
"""

from __future__ import annotations

from spillover_harness.fixtures import CODE_REVIEW, SUMMARIZE, Fixture, PlantedDefect

_FOLLOWING_LINES = 2


def _reported(defect: PlantedDefect, lines: list[str]) -> bool:
    names = {defect.path.lower(), defect.path.rsplit("/", 1)[-1].lower()}
    keywords = [k.lower() for k in defect.keywords]
    for i, line in enumerate(lines):
        if not any(name in line for name in names):
            continue
        window = " ".join(lines[i : i + 1 + _FOLLOWING_LINES])
        if any(k in window for k in keywords):
            return True
    return False


def judge_code_review(output_text: str, fixture: Fixture) -> bool:
    if not output_text.strip():
        return False
    lines = output_text.lower().splitlines()
    return all(_reported(d, lines) for d in fixture.expected.defects)


def judge_summary(output_text: str, fixture: Fixture) -> bool:
    if not output_text.strip():
        return False
    facts = fixture.expected.facts
    if not facts:
        return True
    text = output_text.lower()
    covered = sum(1 for f in facts if f.key.lower() in text)
    return covered >= max(1, fixture.expected.min_facts)


def judge_output(output_text: str | None, fixture: Fixture) -> bool:
    """The judge of the fixture's recipe; no output (a failed step) is not good quality."""
    if output_text is None:
        return False
    if fixture.recipe == CODE_REVIEW:
        return judge_code_review(output_text, fixture)
    if fixture.recipe == SUMMARIZE:
        return judge_summary(output_text, fixture)
    raise ValueError(f"no quality judge for recipe '{fixture.recipe}'")
