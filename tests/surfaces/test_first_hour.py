"""The frictions a new user met in the first hour (issue 30), each shown gone through the CLI."""

from __future__ import annotations

import re
import socket
import subprocess
from pathlib import Path

import pytest

from tests.conftest import Project, runner_bin

NO_PROJECT_COMMANDS = [
    ("runs", "list"),
    ("runs", "show", "x"),
    ("show", "x"),
    ("verify",),
    ("gc",),
    ("collections", "list"),
    ("serve",),
]


@pytest.mark.parametrize("args", NO_PROJECT_COMMANDS, ids=" ".join)
def test_no_project_says_what_was_looked_for_and_names_state(
    tmp_path: Path, args: tuple[str, ...]
) -> None:
    res = Project(tmp_path).cli(*args)
    assert res.exit_code == 2, res.stderr
    assert f"no runner.toml or .runner/ found in {tmp_path.resolve()}" in res.stderr
    assert "--state" in res.stderr
    assert "no journal at" not in res.stderr
    assert not (tmp_path / ".runner").exists()  # nothing was made where nothing belongs


def test_a_project_that_never_ran_says_so(tmp_path: Path) -> None:
    proj = Project(tmp_path)
    proj.write("runner.toml", "[general]\ndefault_provider = 'fake'\n")
    res = proj.cli("runs", "list")
    assert "nothing has run here yet" in res.stderr, res.stderr


def _project_that_ran(tmp_path: Path) -> Project:
    proj = Project(tmp_path)
    proj.write("runner.toml", "[general]\ndefault_provider = 'fake'\n")
    proj.write(
        "pipeline.yaml",
        """\
        runner: 1
        name: tiny
        steps:
          hello:
            uses: template
            with: {text: "hi", vars: {}}
        """,
    )
    assert proj.cli("apply", "pipeline.yaml", "-q").exit_code == 0
    return proj


def test_serve_on_a_busy_port_names_a_free_one_and_prints_no_url(tmp_path: Path) -> None:
    proj = _project_that_ran(tmp_path)
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        res = subprocess.run(
            [*runner_bin(), "serve", "--port", str(port)],
            cwd=proj.root, capture_output=True, text=True, timeout=60,
        )
    assert res.returncode == 2, res.stderr
    m = re.fullmatch(rf"error: port {port} is in use; try --port (\d+)\n", res.stderr)
    assert m, res.stderr
    assert "http://" not in res.stderr + res.stdout  # no URL for a server that never listened
    with socket.socket() as probe:  # the suggested port is free
        probe.bind(("127.0.0.1", int(m.group(1))))


def test_serve_prints_its_url_once_listening(tmp_path: Path) -> None:
    proj = _project_that_ran(tmp_path)
    proc = subprocess.Popen(
        [*runner_bin(), "serve", "--port", "0"],
        cwd=proj.root, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True,
    )
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()
        m = re.search(r"http://127\.0\.0\.1:(\d+)/", line)
        assert m, line
        # The URL is printed after listen(): a connection made at once is accepted.
        with socket.create_connection(("127.0.0.1", int(m.group(1))), timeout=5):
            pass
    finally:
        proc.terminate()
        proc.wait(30)
        if proc.stderr is not None:
            proc.stderr.close()


# -- collections search: words are words, file names count, snippets keep their lines ----------


def _collection(tmp_path: Path) -> Project:
    from runner.state.collections import Collections, Document

    proj = Project(tmp_path)
    proj.write("runner.toml", "")
    with Collections(tmp_path / ".runner") as cols:
        cols.create("documents")
        cols.upsert(
            "documents",
            [
                Document("docs/acme-invoice-1042.txt", "INVOICE 1042\nAcme Supplies\nTotal: 576"),
                Document("docs/letter.txt", "Dear Ms Patel,\nthe rent OR the deposit"),
                Document("docs/uptime.txt", "acme uptime report: no invoice here"),
            ],
        )
    return proj


def _hits(proj: Project, *args: str) -> list[str]:
    res = proj.cli("collections", "search", "documents", *args, "--json")
    assert res.exit_code == 0, res.stderr
    return [h["id"] for h in res.json["hits"]]


def test_search_takes_a_users_words_as_words(tmp_path: Path) -> None:
    proj = _collection(tmp_path)
    # was: no such column: invoice (FTS5 read acme-invoice as column filter syntax)
    assert _hits(proj, "acme-invoice") == ["docs/acme-invoice-1042.txt"]
    assert _hits(proj, "rent OR") == ["docs/letter.txt"]  # OR is a word here
    assert _hits(proj, 'Patel, "rent') == ["docs/letter.txt"]  # quotes and commas too
    assert set(_hits(proj, "acme")) == {"docs/acme-invoice-1042.txt", "docs/uptime.txt"}


def test_search_syntax_reads_fts5(tmp_path: Path) -> None:
    proj = _collection(tmp_path)
    assert set(_hits(proj, "Patel OR uptime", "--syntax")) == {"docs/letter.txt", "docs/uptime.txt"}
    bad = proj.cli("collections", "search", "documents", 'a"b(', "--syntax")
    assert bad.exit_code == 2 and "invalid search query" in bad.stderr


def test_search_finds_file_names(tmp_path: Path) -> None:
    proj = _collection(tmp_path)
    assert _hits(proj, "letter") == ["docs/letter.txt"]  # only in its name
    assert _hits(proj, "1042") == ["docs/acme-invoice-1042.txt"]


def test_search_finds_names_in_a_collection_made_before(tmp_path: Path) -> None:
    """A collection whose index predates searchable names is re-indexed on first search."""
    import sqlite3

    proj = _collection(tmp_path)
    db = sqlite3.connect(tmp_path / ".runner" / "collections.db", isolation_level=None)
    db.execute("DROP TABLE c_documents_fts")
    db.execute("CREATE VIRTUAL TABLE c_documents_fts USING fts5(doc_id UNINDEXED, text)")
    db.execute("INSERT INTO c_documents_fts (rowid, doc_id, text) SELECT rowid, doc_id, text FROM c_documents")
    db.close()
    assert _hits(proj, "letter") == ["docs/letter.txt"]
    assert _hits(proj, "Patel") == ["docs/letter.txt"]


def test_search_snippets_keep_their_lines(tmp_path: Path) -> None:
    proj = _collection(tmp_path)
    res = proj.cli("collections", "search", "documents", "supplies")
    assert res.exit_code == 0
    assert "\\n" not in res.stdout
    assert res.stdout.splitlines() == [
        "docs/acme-invoice-1042.txt",
        "    INVOICE 1042",
        "    Acme [Supplies]",
        "    Total: 576",
    ]


# -- plan: a new item never ran; costs carry their currency, or say no price is known ------------

ITEMS = """\
runner: 1
name: items
item: "${{ params.video }}"
params:
  video: {type: string, default: a}
  title: {type: string, default: t}
steps:
  prompt:
    uses: template
    with: {text: "${{ params.video }} ${{ params.title }}", vars: {}}
  draft:
    uses: llm
    with: {prompt: "${{ steps.prompt.output.text }}"}
    check: ["${{ output.text | length > 0 }}"]
  art:
    uses: image
    with: {prompt: "${{ steps.prompt.output.text }}", n: 2, size: "1024x1024"}
"""


def _items(tmp_path: Path, toml: str = "[general]\ndefault_provider = 'fake'\n") -> Project:
    proj = Project(tmp_path)
    proj.write("runner.toml", toml)
    proj.write("pipeline.yaml", ITEMS)
    return proj


def test_plan_on_a_new_item_says_never_ran(tmp_path: Path) -> None:
    proj = _items(tmp_path)
    assert proj.cli("apply", "pipeline.yaml", "-q").exit_code == 0
    new = proj.cli("plan", "pipeline.yaml", "-p", "video=b").stdout
    assert "run      prompt: never ran" in new, new
    assert "arguments changed" not in new
    same_item = proj.cli("plan", "pipeline.yaml", "-p", "title=u").stdout
    assert "run      prompt: arguments changed (" in same_item, same_item


def test_plan_on_free_providers_says_free(tmp_path: Path) -> None:
    out = _items(tmp_path).cli("plan", "pipeline.yaml").stdout
    assert "calls: 1 text to fake fake-1: free" in out
    assert "calls: 2 image to fake fake-1: free" in out
    assert "estimated cost: nothing (every call goes to a free provider)" in out
    assert "at most 0\n" not in out


OPENAI = """\
[general]
default_provider = "openai"
[providers.openai]
base_url = "http://127.0.0.1:9/v1"
model = "gpt-4o-mini"
api_key_env = "OPENAI_API_KEY"
[prices]
currency = "EUR"
[prices.openai]
input_per_1k = 0.5
output_per_1k = 1.0
"""


def test_plan_costs_carry_the_currency_and_name_what_has_no_price(tmp_path: Path) -> None:
    proj = _items(tmp_path, OPENAI)
    env = {"OPENAI_API_KEY": "sk-test"}
    res = proj.cli("plan", "pipeline.yaml", env=env)
    assert res.exit_code == 0, res.stderr
    out = res.stdout
    assert re.search(r"calls: 1 text to openai gpt-4o-mini: [0-9.]+ EUR\n", out), out
    # the image step is priced by the image model, not the text model, and runner.toml has no
    # image price: said, not counted as 0
    assert (
        "calls: 2 image to openai gpt-image-1: no price known "
        "(runner.toml [prices.openai] has no image price)" in out
    ), out
    assert re.search(r"estimated cost: at most [0-9.]+ EUR, plus 2 call\(s\) with no price known", out)
    doc = proj.cli("plan", "pipeline.yaml", "--json", env=env).json
    models = {(c["kind"], c["model"]) for c in doc["cost"]["calls"]}
    assert models == {("text", "gpt-4o-mini"), ("image", "gpt-image-1")}


# -- the Provider calls table ----------------------------------------------------------------


def _last_run(proj: Project) -> str:
    runs = proj.cli("runs", "list", "--json").json["runs"]
    return str(runs[0]["id"])


def test_completed_calls_show_as_sent_once(tmp_path: Path) -> None:
    import sqlite3

    proj = _items(tmp_path)
    assert proj.cli("apply", "pipeline.yaml", "-q").exit_code == 0
    run = _last_run(proj)
    calls = proj.cli("runs", "show", run, "--json").json["calls"]
    assert len(calls) == 3  # one llm call, two images
    assert all(c["outcome"] == "completed" for c in calls)
    assert all(c["submitted"] and c["attempts"] == 1 for c in calls), calls
    text = proj.cli("runs", "show", run).stdout
    rows = [line for line in text.splitlines() if " completed " in line and "tries" not in line]
    assert rows and not any(re.search(r"completed\s+no\s+0", r) for r in rows), text
    # rows an earlier version wrote (attempts 0, never marked sent) read the same
    db = sqlite3.connect(tmp_path / ".runner" / "journal.db", isolation_level=None)
    db.execute("UPDATE calls SET attempts=0, submitted_at=NULL")
    db.close()
    again = proj.cli("runs", "show", run, "--json").json["calls"]
    assert all(c["submitted"] and c["attempts"] == 1 for c in again), again


# -- skip lines: a reason in parentheses once ----------------------------------------------------

SHELL_PIPE = """\
runner: 1
name: shared
steps:
  make:
    uses: shell
    with:
      run: "mkdir -p out && echo made > out/made.txt"
      outputs: [out/made.txt]
"""


def test_remote_and_fingerprint_hits_say_why_once(tmp_path: Path) -> None:
    pytest.importorskip("fsspec")
    remote = (tmp_path / "remote").as_uri()
    toml = f'[cache]\nremote = "{remote}"\nwritable = true\npush = "apply"\n'
    first, second = Project(tmp_path / "a"), Project(tmp_path / "b")
    for proj in (first, second):
        proj.write("runner.toml", toml)
        proj.write("pipeline.yaml", SHELL_PIPE)
    assert first.cli("apply", "pipeline.yaml").exit_code == 0
    hit = second.cli("apply", "pipeline.yaml")
    assert hit.exit_code == 0, hit.stderr
    out = hit.stdout + hit.stderr
    assert "cached  make (remote)" in out, out
    assert "(cached (" not in out
    again = second.cli("apply", "pipeline.yaml")
    out = again.stdout + again.stderr
    assert "(cached (" not in out, out


def test_one_step_is_singular(tmp_path: Path) -> None:
    proj = Project(tmp_path)
    proj.write("runner.toml", "")
    proj.write("pipeline.yaml", SHELL_PIPE)
    ran = proj.cli("apply", "pipeline.yaml")
    assert "shared (1 step)" in ran.stdout + ran.stderr
    assert "1 steps" not in ran.stdout + ran.stderr
    assert "(1 step)" in proj.cli("validate", "pipeline.yaml").stdout


# -- printed paths open from where the user stands -------------------------------------------------


def _thumbnail_project(tmp_path: Path) -> Project:
    import shutil

    from tests.conftest import REPO

    for folder in ("pipelines", "prompts", "examples"):
        shutil.copytree(REPO / folder, tmp_path / folder, ignore=shutil.ignore_patterns(".runner"))
    shutil.copy(REPO / "runner.toml", tmp_path / "runner.toml")
    return Project(tmp_path)


PATH_LINE = re.compile(r"(?:Files\s+|Contact sheet: |#\d+ \S+\s+)(\S+)$")


def test_printed_paths_open_from_the_working_directory(tmp_path: Path) -> None:
    proj = _thumbnail_project(tmp_path)
    res = proj.cli("apply", "pipelines/thumbnail.yaml", "-p", "n=2")
    assert res.exit_code == 0, res.stderr
    run = _last_run(proj)
    sub = Project(tmp_path / "pipelines")  # the same project, from a subdirectory
    for where, out in ((proj, res.stdout), (sub, sub.cli("show", run).stdout)):
        named = [m.group(1) for line in out.splitlines() if (m := PATH_LINE.search(line))]
        assert len(named) == 4, out  # Files, two finals, the contact sheet
        for name in named:
            assert (where.root / name).exists(), (where.root, name, out)


def test_a_path_far_away_is_shown_absolute(tmp_path: Path) -> None:
    from runner.source.termtext import shown_path

    deep = tmp_path / "a" / "b" / "c" / "d" / "e"
    deep.mkdir(parents=True)
    far = Path("/usr/bin")
    assert shown_path(far, deep) == "/usr/bin"  # shorter than ../../../../../../..
    near = tmp_path / "a" / "x.png"
    assert shown_path(near, deep) == "../../../../x.png"


def test_iterate_shows_the_prompt_with_vars_and_append(tmp_path: Path) -> None:
    proj = _thumbnail_project(tmp_path)
    assert proj.cli("apply", "pipelines/thumbnail.yaml", "-p", "n=1", "-q").exit_code == 0
    run = _last_run(proj)
    assert proj.cli("pick", run, "1").exit_code == 0
    args = ["iterate", run, "--n", "1", "--var", "subject=a cat", "--var", "mood=calm"]
    res = proj.cli(*args, "--prompt-append", "warmer colours", "-q")
    assert res.exit_code == 0, res.stderr
    out = res.stdout.splitlines()
    assert "  Main subject: a cat." in out  # the --var, in the prompt it changed
    at = out.index("  warmer colours")
    assert out[at - 1] == "" and out[at - 2].startswith("  Leave the lower third")  # after a blank line
    assert "--prompt-append: warmer colours" in out
    assert "  not read by the template (they change nothing): mood" in out
    doc = proj.cli(*args, "--prompt-append", "warmer colours", "--json").json["iterate"]
    assert doc["prompt"].endswith("Main subject: a cat.\nStyle: bold colours, high contrast, one clear focal point, cinematic light.\nLeave the lower third calm enough for a title overlay. No text, no logos, no watermarks.\n\nwarmer colours")
    assert doc["unread_vars"] == ["mood"]


# -- runner edit keeps the output's shape and says what binds the edit ---------------------------

HASHES = """\
runner: 1
name: hashes
steps:
  h:
    uses: hash
    with: {value: one}
  n:
    uses: hash
    with: {value: "${{ steps.h.output.short }}"}
    contract: "${{ steps.h.output.short }}"
"""


def test_edit_refuses_an_output_of_another_shape(tmp_path: Path) -> None:
    proj = Project(tmp_path)
    proj.write("runner.toml", "")
    proj.write("pipeline.yaml", HASHES)
    assert proj.cli("apply", "pipeline.yaml", "-q").exit_code == 0
    run = _last_run(proj)
    proj.write("bogus.json", '{"bogus": 1}')
    res = proj.cli("edit", run, "h", "--from", "bogus.json")
    assert res.exit_code == 2, res.stdout
    assert "unknown field(s) bogus; missing field(s) canonical, sha256, short" in res.stderr
    assert "nothing was stored" in res.stderr
    proj.write("kind.json", '{"canonical": "x", "sha256": "y", "short": 5}')
    res = proj.cli("edit", run, "h", "--from", "kind.json")
    assert res.exit_code == 2 and "short (string, got number)" in res.stderr
    listed = proj.cli("runs", "show", run, "--json").json  # nothing stored: h is as it ran
    assert listed["executions"][0]["output"]["short"] != 5
    # an edit that keeps the shape is stored; a step with no contract: says its key binds it
    proj.write("fine.json", '{"canonical": "x", "sha256": "y", "short": "EDITED"}')
    ok = proj.cli("edit", run, "h", "--from", "fine.json")
    assert ok.exit_code == 0, ok.stderr
    assert "while the step's inputs are unchanged (it has no `contract:`" in ok.stdout
    assert "contract holds" not in ok.stdout
    with_contract = proj.cli("edit", run, "n", "--from", "fine.json")
    assert "while its contract holds" in with_contract.stdout


# -- a closed output pipe does not strand the run ---------------------------------------------------

SLOW = """\
runner: 1
name: slow
phases: [one, two, three]
steps:
  a: {uses: shell, phase: one, with: {run: "sleep 0.3"}}
  b: {uses: shell, phase: two, needs: [a], with: {run: "sleep 0.3"}}
  c: {uses: shell, phase: three, needs: [b], with: {run: "sleep 0.3"}}
"""


def test_a_run_whose_reader_left_still_completes(tmp_path: Path) -> None:
    """`runner apply ... 2>&1 | head -1`: the progress lines after the first meet a closed pipe;
    the run goes on and ends completed (it stayed `running` until the next apply)."""
    proj = Project(tmp_path)
    proj.write("runner.toml", "")
    proj.write("pipeline.yaml", SLOW)
    proc = subprocess.Popen(
        [*runner_bin(), "apply", "pipeline.yaml"],
        cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )
    assert proc.stderr is not None
    first = proc.stderr.readline()
    assert first.startswith("run "), first
    proc.stderr.close()  # the reader leaves
    assert proc.wait(60) == 0
    runs = proj.cli("runs", "list", "--json").json["runs"]
    assert [r["status"] for r in runs] == ["completed"], runs
    shown = proj.cli("runs", "show", runs[0]["id"], "--json").json
    assert sorted(e["step_id"] for e in shown["executions"] if e["status"] == "completed") == ["a", "b", "c"]


# -- the run folder: read-only views of the store, the pick carried, edits noticed ---------------


def _tree_bytes(root: Path) -> int:
    seen: set[tuple[int, int]] = set()
    total = 0
    for p in root.rglob("*"):
        st = p.lstat()
        if (st.st_dev, st.st_ino) in seen or not p.is_file():
            continue
        seen.add((st.st_dev, st.st_ino))
        total += st.st_size
    return total


def test_an_unchanged_reapply_links_the_finals_and_shows_the_pick(tmp_path: Path) -> None:
    proj = _thumbnail_project(tmp_path)
    args = ("apply", "pipelines/thumbnail.yaml", "-p", "n=4", "-q")
    assert proj.cli(*args).exit_code == 0
    first = _last_run(proj)
    assert proj.cli("pick", first, "2").exit_code == 0
    assert proj.cli(*args).exit_code == 0  # its contact sheet is new: it shows the pick
    before = _tree_bytes(tmp_path / ".runner")
    assert proj.cli(*args).exit_code == 0
    second = _last_run(proj)
    assert second != first
    added = _tree_bytes(tmp_path / ".runner") - before
    assert added < 100_000, added  # was ~600 KB: four finals and a contact sheet copied
    folder = tmp_path / ".runner" / "runs" / second
    doc = proj.cli("show", second, "--json").json
    for it in doc["iterations"]:
        view = folder / f"final-{it['ordinal']}.jpg"
        obj = tmp_path / ".runner" / "objects" / it["assets"]["final"][:2] / it["assets"]["final"][2:]
        assert view.stat().st_ino == obj.stat().st_ino  # a link to the object, not a copy
        assert view.stat().st_mode & 0o222 == 0  # read-only
    assert (folder / "contact-sheet.png").stat().st_mode & 0o222 == 0
    # the newest run reuses the picked iteration: it shows the pick too
    assert [it["ordinal"] for it in doc["iterations"] if it["picked"]] == [2]
    shown = proj.cli("show", second).stdout
    assert re.search(r"^\s+2\s+completed .*★$", shown, re.M), shown
    assert proj.cli("export", second, "--to", "out", "--picked").exit_code == 0


def test_a_final_edited_in_the_run_folder_is_noticed(tmp_path: Path) -> None:
    proj = _thumbnail_project(tmp_path)
    assert proj.cli("apply", "pipelines/thumbnail.yaml", "-p", "n=2", "-q").exit_code == 0
    run = _last_run(proj)
    assert proj.cli("verify").exit_code == 0
    view = tmp_path / ".runner" / "runs" / run / "final-1.jpg"
    original = view.read_bytes()
    view.unlink()  # an editor that saves a new file under the name
    view.write_bytes(original[:-10] + b"0123456789")
    checked = proj.cli("verify")
    assert checked.exit_code == 1
    assert f".runner/runs/{run}/final-1.jpg was edited by hand" in checked.stdout, checked.stdout
    shown = proj.cli("show", run).stdout
    assert f"Edited     .runner/runs/{run}/final-1.jpg was changed by hand" in shown
    planned = proj.cli("plan", "pipelines/thumbnail.yaml", "-p", "n=2")
    assert f"note: .runner/runs/{run}/final-1.jpg was edited by hand" in planned.stdout, planned.stdout
    doc = proj.cli("plan", "pipelines/thumbnail.yaml", "-p", "n=2", "--json").json
    assert doc["run_folder_edits"] == [str(view)]
    exported = proj.cli("export", run, "--to", "out")
    assert exported.exit_code == 0
    assert "final-1.jpg was edited by hand; the recorded final was exported" in exported.stderr
    assert (tmp_path / "out" / "dQw4w9WgXcQ-1.jpg").read_bytes() == original
    again = proj.cli("apply", "pipelines/thumbnail.yaml", "-p", "n=2")
    assert f"note: .runner/runs/{run}/final-1.jpg (an earlier run's final) was edited by hand" in again.stderr
    # deleted, the view comes back from the store with `runner show`
    view.unlink()
    assert proj.cli("show", run).exit_code == 0
    assert view.read_bytes() == original and view.stat().st_mode & 0o222 == 0
    assert proj.cli("verify").exit_code == 0


def test_prompts_check_without_a_lock_says_nothing_is_locked(tmp_path: Path) -> None:
    res = Project(tmp_path).cli("prompts", "check")
    assert res.exit_code == 0
    # the folder said from where the user stands (it is the folder itself), never absolute
    assert res.stdout.startswith("no prompts.lock here: no prompt version is locked")
    assert "match" not in res.stdout  # was: "prompt versions match prompts.lock"


def test_the_pages_scripts_never_parse_text_as_html() -> None:
    """The markdown view builds elements that hold text; no script of the page has a way to
    turn a string into markup (the Chromium tests show a <script> in a reply staying text)."""
    from tests.conftest import REPO

    scripts = sorted((REPO / "runner" / "surfaces" / "web" / "static").glob("*.js"))
    assert {p.name for p in scripts} >= {"app.js", "values.js"}
    sinks = ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "DOMParser", "eval(", "new Function")
    for script in scripts:
        text = script.read_text()
        found = [s for s in sinks if s in text]
        assert not found, (script.name, found)
    base = (REPO / "runner" / "surfaces" / "web" / "templates" / "base.html").read_text()
    assert base.index("/static/values.js") < base.index("/static/app.js")
