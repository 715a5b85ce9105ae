"""Hostile templates: refused with a clear error, within a second, small, inside the root."""

from __future__ import annotations

from pathlib import Path

import pytest

from runner.errors import TemplateError
from runner.expr import render_template, template_environment

from .harness import MAX_PEAK_BYTES, MAX_SECONDS, attempt

EXP_MACRO = "{% macro f(n) %}{% if n %}{{ f(n-1) }}{{ f(n-1) }}{% endif %}{% endmacro %}{{ f(40) }}"

HOSTILE: list[tuple[str, str]] = [
    (
        "{% for i in range(10000) %}{% for j in range(10000) %}x{% endfor %}{% endfor %}",
        "over the limit of 100000 loop iterations and calls",
    ),
    (
        "{% for i in range(10000) %}{% for j in range(10000) %}{% endfor %}{% endfor %}",
        "over the limit of 100000 loop iterations and calls",
    ),
    (
        "{% for a in range(100) %}{% for b in range(100) %}{% for c in range(100) %}"
        "{{ a }}{% endfor %}{% endfor %}{% endfor %}",
        "over the limit of 100000",
    ),
    ("{% macro f(n) %}{{ f(n) }}{% endmacro %}{{ f(1) }}", "nesting too deep"),
    (EXP_MACRO, "over the limit of 100000 loop iterations and calls"),
    ("{% for i in range(10000) recursive %}{{ loop(range(10000)) }}{% endfor %}", "refused"),
    (
        "{% set x = 'a'*1000000 %}{% for i in range(10000) %}{{ x }}{% endfor %}",
        "output over the limit of 16000000 characters",
    ),
    ("{% set x = 'a'*4000000 %}{{ x ~ x ~ x ~ x ~ x }}", "over 16000000 characters"),
    ("{% include '../outside.txt' %}", "escapes the pipeline root"),
    ("{% include '/etc/passwd' %}", "is absolute"),
    ("{% include 'link.j2' %}", "escapes the pipeline root"),
    ("{% import '../outside.txt' as m %}", "escapes the pipeline root"),
    ("{% from '/etc/passwd' import x %}", "is absolute"),
    ("{% extends '../../../../etc/passwd' %}", "escapes the pipeline root"),
    ("{% include name %}", "is absolute"),
    ("{{ self }}", "'self' is not available in the sandbox"),
    ("{{ self._TemplateReference__context }}", "'self' is not available in the sandbox"),
    ("{{ cycler('a').next() }}", "'cycler' is undefined"),
    ("{{ joiner() }}", "'joiner' is undefined"),
    ("{{ lipsum() }}", "'lipsum' is undefined"),
    ("{% set ns = namespace(a=1) %}", "'namespace' is undefined"),
    ("{{ config.items() }}", "'config' is undefined"),
    ("{{ request.environ }}", "'request' is undefined"),
    ("{{ x|attr('__class__') }}", "access to attribute '__class__'"),
    ("{{ f|attr('__code__') }}", "access to attribute '__code__'"),
    ("{{ '{0.__class__.__init__.__globals__}'.format(x) }}", "is unsafe"),
    ("{{ ''.__class__.__mro__[1].__subclasses__() }}", "access to attribute '__class__'"),
    (
        "{% set l = [] %}{% for i in range(3) %}{{ l.append(i) }}{% endfor %}",
        "access to attribute 'append'",
    ),
    ("{{ ('a\n' * 100000)|indent(1000) }}", "'indent' result would be too large"),
    ("{{ 'a'|wordwrap(1, wrapstring='x'*10**7) }}", "'wordwrap' result would be too large"),
    ("{{ 'x'|center(10**9) }}", "argument 1000000000 is over the limit"),
    ("{{ [1, 2]|batch(10**9)|list }}", "argument 1000000000 is over the limit"),
    ("{{ 9**(9**9) }}", "power result would be too large"),
    ("{{ " + "(" * 5000 + "1" + ")" * 5000 + " }}", "200 levels"),
    ("x" * 10_000_001, "over 1000000 characters"),
]


@pytest.fixture
def root(tmp_path: Path) -> Path:
    (tmp_path / "outside.txt").write_text("SECRET-OUTSIDE")
    root = tmp_path / "root"
    (root / "prompts").mkdir(parents=True)
    (root / "prompts" / "ok.j2").write_text("hello {{ who }}")
    (root / "link.j2").symlink_to(tmp_path / "outside.txt")
    return root


def helper() -> None:
    """A function in the variables: its code must stay out of reach."""


@pytest.mark.parametrize(("text", "expected"), HOSTILE, ids=[t[:40] for t, _ in HOSTILE])
def test_hostile_template_is_refused(
    text: str, expected: str, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RUNNER_TEST_SECRET", "s3cr3t-value")
    env = template_environment(root)
    variables = {"x": object(), "f": helper, "name": "/etc/passwd", "who": "w"}
    outcome = attempt(lambda: render_template(env, text=text, variables=variables))
    assert isinstance(outcome.error, TemplateError), outcome.error
    message = str(outcome.error)
    # The step budget and the time budget both stop a loop bomb: which comes first depends on
    # how loaded the machine is (100,000 steps take ~0.3 s idle, over 0.8 s at load 13).
    slow = expected.startswith("over the limit of 100000") and "took longer than" in message
    assert expected in message or slow, message
    assert "SECRET-OUTSIDE" not in str(outcome.error) and "s3cr3t" not in str(outcome.error)
    assert outcome.seconds < MAX_SECONDS
    assert outcome.peak_bytes < MAX_PEAK_BYTES
    outside = [e for e in outcome.events if e[0] == "open" and str(root) not in e[1]]
    assert outside == [], outside
    assert not [e for e in outcome.events if e[0] != "open"]


def test_templates_inside_the_root_still_work(root: Path) -> None:
    env = template_environment(root)
    out = render_template(env, text="{% include 'prompts/ok.j2' %}!", variables={"who": "you"})
    assert out == "hello you!"
    assert render_template(env, name="prompts/ok.j2", variables={"who": "me"}) == "hello me"
    big = "{% for i in range(300) %}{% for j in range(300) %}.{% endfor %}{% endfor %}"
    assert len(render_template(env, text=big, variables={})) == 90_000


def test_a_template_name_outside_the_root_is_refused(root: Path) -> None:
    env = template_environment(root)
    with pytest.raises(TemplateError, match="escapes the pipeline root"):
        render_template(env, name="../outside.txt", variables={})


def test_data_that_looks_like_a_template_is_rendered_as_text(root: Path) -> None:
    reply = "{{ 7*7 }} ${{ params }} {% include '/etc/passwd' %} {{ self }}"
    env = template_environment(root)
    assert (
        render_template(env, text="Reply: {{ reply }}", variables={"reply": reply})
        == f"Reply: {reply}"
    )
