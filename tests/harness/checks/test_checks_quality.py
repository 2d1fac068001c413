"""Quality judges: the same checks for simulated and real outputs."""

from __future__ import annotations

from functools import cache
from pathlib import Path

from spillover_harness.checks import judge_code_review, judge_output, judge_summary
from spillover_harness.fixtures import Fixture, FixtureSet, build_fixtures
from spillover_harness.sim.step import run_step

SEED = 5150


@cache
def fixtures() -> FixtureSet:
    return build_fixtures(SEED)


def fx(recipe: str, name: str) -> Fixture:
    return fixtures().get(recipe, name)


def review_for(fixture: Fixture, skip: int | None = None) -> str:
    lines = ["# Review", ""]
    for i, d in enumerate(fixture.expected.defects):
        if i != skip:
            lines.append(f"- {d.path} line {d.line}: {d.keywords[0]} here.")
    return "\n".join(lines)


def test_a_review_naming_every_defect_passes_and_one_missing_fails() -> None:
    large = fx("code-review", "large")
    assert len(large.expected.defects) == 3
    assert judge_code_review(review_for(large), large)
    for i in range(3):
        assert not judge_code_review(review_for(large, skip=i), large)


def test_the_keyword_must_be_near_the_file_name() -> None:
    f = fx("code-review", "small")
    d = f.expected.defects[0]
    name = d.path.rsplit("/", 1)[-1]
    assert judge_code_review(f"`{name.upper()}`:\n  the {d.keywords[-1].upper()} problem", f)
    far = f"{name}: fine\n\n\n\nunrelated: {d.keywords[0]}"
    assert not judge_code_review(far, f)
    assert not judge_code_review("", f)
    assert not judge_code_review(f"{d.keywords[0]} somewhere", f)


def test_a_summary_needs_the_facts_of_the_last_tenth() -> None:
    doc = fx("summarize", "document")
    keys = [f.key for f in doc.expected.facts]
    assert judge_summary("Summary: " + ", ".join(keys), doc)
    assert judge_summary("Summary: " + ", ".join(k.lower() for k in keys[:2]), doc)
    assert not judge_summary("Summary: " + keys[0], doc)
    assert not judge_summary("A summary of the beginning only.", doc)
    assert not judge_summary("", doc)


def test_judge_output_dispatches_and_no_output_is_not_good() -> None:
    assert judge_output(None, fx("summarize", "document")) is False
    assert judge_output(review_for(fx("code-review", "medium")), fx("code-review", "medium"))


def test_simulated_outputs_pass_and_a_lazy_reader_fails(tmp_path: Path) -> None:
    for fixture in fixtures():
        run = run_step(
            fixture=fixture, env={}, seed=SEED, repetition=1, run_id="q", output_dir=tmp_path
        )
        assert judge_output(run.output_text, fixture), fixture.input_name
    doc = fx("summarize", "document")
    lazy = 0
    for rep in range(1, 21):
        run = run_step(
            fixture=doc,
            env={"CLERUM_WORKFLOW_TOOL_SPILLOVER_THRESHOLD": "32768"},
            seed=SEED,
            repetition=rep,
            run_id=f"lazy-{rep}",
            output_dir=tmp_path / str(rep),
        )
        if not judge_output(run.output_text, doc):
            lazy += 1
            assert run.reads * 32768 < len(doc.document)  # it stopped before the end
    assert 0 < lazy < 20
