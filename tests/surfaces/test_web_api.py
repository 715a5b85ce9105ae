"""`runner serve`'s JSON API (and pages) against a real state dir built by real applies."""

from __future__ import annotations

import json
import shutil
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runner.surfaces.web.app import create_app
from tests.conftest import REPO, Project
from tests.webdriving import TOKEN

# Starlette 1.x nudges TestClient users towards httpx2 (at import), which is not a dependency here.
with warnings.catch_warnings():
    warnings.filterwarnings("ignore", "Using `httpx` with `starlette.testclient`")
    from starlette.testclient import TestClient

AUTH = {"X-Runner-Token": TOKEN}
ORIGIN = "http://testserver"

GATED = """\
    runner: 1
    name: gated
    phases: [make, check, ship]
    steps:
      draft:
        uses: shell
        phase: make
        with:
          run: "echo 'draft ${{ feedback | join(\\",\\") }}'"
      review:
        uses: human_gate
        phase: check
        with:
          summary: "Publish this draft?"
          show: {draft: "${{ steps.draft.output.stdout }}"}
          revise: draft
      publish:
        uses: shell
        phase: ship
        needs: [review]
        with: {run: "echo published"}
"""


@dataclass
class Site:
    project: Project
    state: Path
    hero: str  # a completed thumbnail run
    gated: str  # a run waiting at gate `review`
    gated2: str  # another one (item b)

    def cli(self, *args: str) -> Any:
        res = self.project.cli(*args, "--state", str(self.state))
        return res

    def client(self, *, login: bool = True, **kw: Any) -> TestClient:
        """A client that opened the printed URL (so it holds the session cookie), as a
        browser does; ``login=False`` for one without credentials."""
        app = create_app(self.state, TOKEN, extra_hosts=["testserver"], cwd=self.project.root)
        client = TestClient(app, **kw)
        if login:
            res = client.get(f"/?token={TOKEN}", follow_redirects=False)
            assert res.status_code == 303 and TOKEN not in res.headers["location"]
        return client


def build_site(root: Path) -> Site:
    """A thumbnail hero run and two runs suspended at a human gate, in one state dir."""
    proj = Project(root)
    (root / "pipelines").mkdir(parents=True)
    shutil.copy(REPO / "pipelines" / "thumbnail.yaml", root / "pipelines" / "thumbnail.yaml")
    shutil.copytree(REPO / "prompts" / "thumbnail", root / "prompts" / "thumbnail")
    proj.write("gated.yaml", GATED)
    state = root / ".runner"
    hero = proj.cli("apply", "pipelines/thumbnail.yaml", "--json", "-q", "--state", ".runner")
    assert hero.exit_code == 0, hero.stderr
    gated = [
        proj.cli("apply", "gated.yaml", "--json", "-q", "--state", ".runner", "--item", i)
        for i in ("a", "b")
    ]
    assert [g.exit_code for g in gated] == [7, 7], [g.stderr for g in gated]
    return Site(
        proj, state, hero.json["run"]["id"], gated[0].json["run"]["id"], gated[1].json["run"]["id"]
    )


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Site:
    return build_site(tmp_path_factory.mktemp("web"))


@pytest.fixture
def client(site: Site) -> Iterator[TestClient]:
    with site.client() as c:
        yield c


def cli_json(site: Site, *args: str, state: bool = True) -> Any:
    res = site.cli(*args, "--json") if state else site.project.cli(*args, "--json")
    return json.loads(res.stdout)


# -- reading ---------------------------------------------------------------------------------


def test_runs_list_agrees_with_cli_and_filters(site: Site, client: TestClient) -> None:
    doc = client.get("/api/runs").json()
    assert doc == cli_json(site, "runs", "list", "--limit", "50")
    assert {r["id"] for r in doc["runs"]} >= {site.hero, site.gated, site.gated2}
    awaiting = client.get("/api/runs", params={"awaiting": "true"}).json()["runs"]
    assert {r["id"] for r in awaiting} == {site.gated, site.gated2}
    thumbs = client.get("/api/runs", params={"pipeline": "thumbnail"}).json()["runs"]
    assert {r["pipeline"] for r in thumbs} == {"thumbnail"}
    item_b = client.get("/api/runs", params={"item": "b"}).json()["runs"]
    assert [r["id"] for r in item_b] == [site.gated2]
    one = client.get("/api/runs", params={"limit": "1"}).json()["runs"]
    assert len(one) == 1
    bad = client.get("/api/runs", params={"limit": "zero"})
    assert bad.status_code == 400 and "integer" in bad.json()["error"]["message"]


def test_run_document_agrees_with_runs_show(site: Site, client: TestClient) -> None:
    doc = client.get(f"/api/runs/{site.hero}").json()
    cli_doc = cli_json(site, "runs", "show", site.hero)
    for key in ("run", "executions", "iterations"):
        assert doc[key] == cli_doc[key]
    assert len(doc["iterations"]) == 4
    groups = [(g["phase"], [s["id"] for s in g["steps"]]) for g in doc["phases"]]
    assert groups == [("prompt", ["prompt"]), ("generate", ["generate"]), ("finalize", ["final"])]
    for g in doc["phases"]:
        for s in g["steps"]:
            assert s["status"] == "completed" and s["attempts"] == 1
            assert s["finished_at"] >= s["started_at"] and s["duration_s"] > 0
    assert doc["phases"][0]["steps"][0]["output"]["text"].startswith("A striking")
    assert doc["last_event"] > 0 and doc["decisions"] == []
    # a unique prefix works as it does on the command line
    assert client.get(f"/api/runs/{site.hero[:-2]}").json()["run"]["id"] == site.hero


def test_gated_run_shows_pending_decision_and_skipped_step(site: Site, client: TestClient) -> None:
    doc = client.get(f"/api/runs/{site.gated2}").json()
    steps = {s["id"]: s["status"] for g in doc["phases"] for s in g["steps"]}
    assert steps["draft"] in ("completed", "cached") and steps["review"] == "awaiting_human"
    assert [g["phase"] for g in doc["phases"]] == ["make", "check", "ship"]
    assert steps["publish"] in ("pending", "skipped")
    [pending] = [d for d in doc["decisions"] if d["status"] == "pending"]
    assert pending["gate"] == "review" and pending["summary"]["summary"] == "Publish this draft?"


def test_events_json_and_stream_agree_with_cli(site: Site, client: TestClient) -> None:
    res = site.cli("runs", "events", site.hero)
    cli_events = [json.loads(line) for line in res.stdout.splitlines()]
    doc = client.get(f"/api/runs/{site.hero}/events").json()
    assert doc["events"] == cli_events and doc["run_id"] == site.hero
    after = cli_events[3]["seq"]
    later = client.get(f"/api/runs/{site.hero}/events", params={"after": after}).json()
    assert later["events"] == cli_events[4:]
    stream = client.get(f"/api/runs/{site.hero}/events", headers={"Accept": "text/event-stream"})
    assert stream.status_code == 200
    assert stream.headers["content-type"].startswith("text/event-stream")
    frames = [f for f in stream.text.split("\n\n") if f.startswith("id:") or "event: end" in f]
    data = [json.loads(f.split("data: ", 1)[1]) for f in frames]
    assert data[:-1] == cli_events
    assert data[-1] == {
        "run_id": site.hero,
        "status": "completed",
        "last_event": cli_events[-1]["seq"],
    }
    resumed = client.get(
        f"/api/runs/{site.hero}/events?stream=1", headers={"Last-Event-ID": str(after)}
    )
    ids = [int(line[4:]) for line in resumed.text.splitlines() if line.startswith("id: ")]
    assert ids == [e["seq"] for e in cli_events[4:]]


def test_steps_and_providers_agree_with_cli(site: Site, client: TestClient) -> None:
    assert client.get("/api/steps").json() == cli_json(site, "steps", state=False)
    assert client.get("/api/providers").json() == cli_json(site, "providers", state=False)


def test_openapi_describes_every_api_route(client: TestClient) -> None:
    from runner.surfaces.web.api import ROUTES

    doc = client.get("/api/openapi.json").json()
    assert doc["openapi"].startswith("3.")
    described = {(p, m.upper()) for p, ops in doc["paths"].items() for m in ops}
    for route in ROUTES:
        if route.path == "/api/openapi.json":
            continue
        methods = (route.methods or set()) - {"HEAD"}
        for m in methods:
            assert (route.path, m) in described


def test_images_by_digest_only_for_iterations(site: Site, client: TestClient) -> None:
    doc = client.get(f"/api/runs/{site.hero}").json()
    final = doc["iterations"][0]["assets"]["final"]
    res = client.get(f"/api/objects/{final}")
    assert res.status_code == 200 and res.headers["content-type"] == "image/jpeg"
    store = site.state / "objects"
    assert res.content == (store / final[:2] / final[2:]).read_bytes()
    for bad in ("../journal.db", "ABC", final.upper(), "0" * 64, final[:63] + "g"):
        r = client.get(f"/api/objects/{bad}")
        assert r.status_code == 404 and r.json()["error"]["type"] == "NotFound"
    # an object that exists but is no image of an iteration is refused too
    from runner.state.objects import ObjectStore

    other = ObjectStore(store).put_bytes(b'{"secret": "not an iteration image"}')
    assert client.get(f"/api/objects/{other}").status_code == 404


def test_unknown_ids_are_404_with_the_cli_message(site: Site, client: TestClient) -> None:
    cases = [
        ("get", "/api/runs/nope-nope", None, ("runs", "show", "nope-nope")),
        ("get", "/api/runs/nope-nope/events", None, ("runs", "show", "nope-nope")),
        ("post", f"/api/runs/{site.hero}/pick", {"which": "9"}, ("pick", site.hero, "9")),
        ("post", "/api/runs/nope-nope/pick", {"which": "1"}, ("pick", "nope-nope", "1")),
        (
            "post",
            "/api/runs/nope-nope/gates/review/decide",
            {"decision": "approve"},
            ("decide", "nope-nope", "review", "approve"),
        ),
        (
            "post",
            f"/api/runs/{site.gated}/gates/nope/decide",
            {"decision": "approve"},
            ("decide", site.gated, "nope", "approve"),
        ),
    ]
    for method, url, body, argv in cases:
        res = client.request(method.upper(), url, json=body, headers=AUTH)
        expected = cli_json(site, *argv)
        assert res.status_code == 404, url
        assert res.json() == expected, url
        assert expected["exit_code"] == 3
    page = client.get("/runs/nope-nope")
    assert page.status_code == 404 and "unknown run &#x27;nope-nope&#x27;" in page.text
    assert client.get("/api/no/such/thing").json()["error"]["type"] == "NotFound"


# -- guards ----------------------------------------------------------------------------------


def test_changes_need_the_token(site: Site, client: TestClient) -> None:
    url = f"/api/runs/{site.hero}/pick"
    for headers in ({}, {"X-Runner-Token": "wrong"}, {"X-Runner-Token": ""}):
        res = client.post(url, json={"which": "1"}, headers=headers)
        assert res.status_code == 403
        assert res.json()["error"]["type"] == "Forbidden"
    assert not any(
        it["picked"]
        for it in cli_json(site, "runs", "show", site.hero)["iterations"]
        if it["ordinal"] == 1
    )


def test_foreign_origin_and_host_are_refused(site: Site, client: TestClient) -> None:
    url = f"/api/runs/{site.hero}/pick"
    for origin in (
        "http://evil.example",
        "http://testserver.evil.example",
        "null",
        "https://testserver:1",
        "http://[::1",
    ):
        res = client.post(url, json={"which": "1"}, headers={**AUTH, "Origin": origin})
        assert res.status_code == 403, origin
    cross = client.post(url, json={"which": "1"}, headers={**AUTH, "Sec-Fetch-Site": "cross-site"})
    assert cross.status_code == 403
    # DNS rebinding: a page served under another name may not even read
    assert client.get("/api/runs", headers={"Host": "evil.example"}).status_code == 403
    assert client.get("/", headers={"Host": "evil.example"}).status_code == 403
    ok = client.post(url, json={"which": "1"}, headers={**AUTH, "Origin": ORIGIN})
    assert ok.status_code == 200


def test_pages_never_carry_the_token(site: Site, client: TestClient) -> None:
    for path in ("/", f"/runs/{site.hero}", "/steps", "/providers", "/static/app.js"):
        assert TOKEN not in client.get(path).text, path
    assert TOKEN not in client.get("/", headers={"Host": "evil.example"}).text


# -- changing --------------------------------------------------------------------------------


def test_pick_moves_the_star_and_agrees_with_runs_show(site: Site, client: TestClient) -> None:
    for which, expect in (("2", 2), (3, 3), (f"{site.hero}-2", 2)):
        res = client.post(f"/api/runs/{site.hero}/pick", json={"which": which}, headers=AUTH)
        assert res.status_code == 200
        assert res.json() == {
            "run_id": site.hero,
            "exit_code": 0,
            "picked": {"id": f"{site.hero}-{expect}", "ordinal": expect},
        }
        api = client.get(f"/api/runs/{site.hero}").json()["iterations"]
        assert [it["ordinal"] for it in api if it["picked"]] == [expect]
        assert api == cli_json(site, "runs", "show", site.hero)["iterations"]
        page = client.get(f"/runs/{site.hero}").text
        assert f'class="tile picked tile-completed" id="tile-{expect}"' in page
        assert page.count("tile picked") == 1
    bad = client.post(f"/api/runs/{site.hero}/pick", json={}, headers=AUTH)
    assert bad.status_code == 400 and "'which' is required" in bad.json()["error"]["message"]
    junk = client.post(f"/api/runs/{site.hero}/pick", content=b"[1,", headers=AUTH)
    assert junk.status_code == 400 and junk.json()["exit_code"] == 2


def test_export_copies_finals_like_the_cli(site: Site, client: TestClient) -> None:
    res = client.post(f"/api/runs/{site.hero}/export", json={"to": "web-out"}, headers=AUTH)
    assert res.status_code == 200, res.text
    doc = res.json()
    cli_doc = cli_json(site, "export", site.hero, "--to", "cli-out")
    assert [Path(f).name for f in doc["files"]] == [Path(f).name for f in cli_doc["files"]]
    for web, cli in zip(doc["files"], cli_doc["files"], strict=True):
        assert Path(web).parent == site.project.root / "web-out"
        assert Path(web).read_bytes() == Path(cli).read_bytes()
    one = client.post(
        f"/api/runs/{site.hero}/export",
        json={"to": str(site.project.root / "one"), "iteration": 2, "raw": True},
        headers=AUTH,
    ).json()
    assert one["iteration_id"] == f"{site.hero}-2" and one["raw"] is True
    assert [Path(f).name for f in one["files"]] == ["dQw4w9WgXcQ-2.png"]
    for body in ({}, {"to": ""}, {"to": "x\x00y"}, {"to": 5, "raw": "yes"}):
        assert (
            client.post(f"/api/runs/{site.hero}/export", json=body, headers=AUTH).status_code == 400
        ), body
    none = client.post(f"/api/runs/{site.gated}/export", json={"to": "x"}, headers=AUTH)
    assert none.status_code == 400
    assert none.json() == cli_json(site, "export", site.gated, "--to", "x")


def test_iterate_waits_or_streams_a_child_run(site: Site, client: TestClient) -> None:
    res = client.post(
        f"/api/runs/{site.hero}/iterate",
        headers=AUTH,
        json={"iteration": 1, "n": 2, "prompt_append": "warmer", "wait": True},
    )
    assert res.status_code == 200, res.text
    child = res.json()
    assert child["exit_code"] == 0 and child["run"]["parent_run_id"] == site.hero
    assert len(child["iterations"]) == 2
    show = cli_json(site, "runs", "show", child["run"]["id"])
    assert show["run"]["kind"] == "iterate"
    assert show["run"]["reference_asset"]["iteration_id"] == f"{site.hero}-1"
    assert show["run"]["params"]["prompt_append"] == "warmer"
    # without wait: 202 at once, then the live stream follows the child to its end
    started = client.post(
        f"/api/runs/{site.hero}/iterate", headers=AUTH, json={"iteration": f"{site.hero}-3", "n": 1}
    )
    assert started.status_code in (200, 202), started.text
    rid = started.json()["run_id"] if started.status_code == 202 else started.json()["run"]["id"]
    stream = client.get(f"/api/runs/{rid}/events?stream=1").text
    assert '"type": "RunFinished"' in stream and "event: end" in stream
    assert len(client.get(f"/api/runs/{rid}").json()["iterations"]) == 1
    bad = client.post(f"/api/runs/{site.hero}/iterate", json={"n": 0}, headers=AUTH)
    assert bad.status_code == 400
    gated = client.post(f"/api/runs/{site.gated}/iterate", json={}, headers=AUTH)
    assert gated.status_code == 400
    assert gated.json() == cli_json(site, "iterate", site.gated, "-q")


def test_decide_records_a_decision_like_the_cli(site: Site, client: TestClient) -> None:
    url = f"/api/runs/{site.gated}/gates/review/decide"
    bad = client.post(url, json={"decision": "maybe"}, headers=AUTH)
    assert bad.status_code == 400 and "approve, reject, revise" in bad.json()["error"]["message"]
    # resume: false keeps the run waiting, so the next answers can be compared with the CLI's
    res = client.post(
        url,
        headers=AUTH,
        json={
            "decision": "revise",
            "input": {"tone": "dry"},
            "comment": "shorter",
            "by": "ada",
            "resume": False,
        },
    )
    assert res.status_code == 200, res.text
    doc = res.json()
    assert doc["decision"]["decision"] == "revise" and doc["decision"]["by"] == "ada"
    rows = cli_json(site, "runs", "decisions", site.gated)["decisions"]
    assert rows[-1] == doc["decision"]
    assert doc["resumed"] is False
    again = client.post(url, json={"decision": "approve", "resume": False}, headers=AUTH)
    assert again.status_code == 409
    assert again.json() == cli_json(site, "decide", site.gated, "review", "approve")
    done = client.post(
        f"/api/runs/{site.hero}/gates/review/decide", json={"decision": "approve"}, headers=AUTH
    )
    assert done.status_code == 409 and "is not waiting for a decision" in done.text
    assert done.json() == cli_json(site, "decide", site.hero, "review", "approve")


# -- pages -------------------------------------------------------------------------------------


def test_pages_render(site: Site, client: TestClient) -> None:
    runs = client.get("/").text
    assert site.hero in runs and site.gated in runs
    assert site.hero not in client.get("/?awaiting=1").text
    run = client.get(f"/runs/{site.hero}").text
    assert run.count('class="tile') == 4 and "Iterate from this" in run
    assert [p for p in ("prompt", "generate", "finalize") if f'<h3 class="phase">{p}</h3>' in run]
    gate = client.get(f"/runs/{site.gated2}").text
    assert 'id="gate-review"' in gate and "Publish this draft?" in gate
    assert "<code>template</code>" in client.get("/steps").text
    assert "<code>fake</code>" in client.get("/providers").text
    css = client.get("/static/app.css")
    assert css.status_code == 200 and "tile" in css.text
    assert client.get("/static/app.js").status_code == 200


# -- no request makes the server fail ------------------------------------------------------------

JUNK = st.text(max_size=12)
SAFE = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-_", min_size=1, max_size=10)


def _value(schema: dict[str, Any], name: str) -> st.SearchStrategy[Any]:
    """A value for one schema: mostly of the declared type, sometimes of another."""
    if name == "to":  # a folder the server will create: keep it inside its working directory
        return SAFE
    types = schema.get("type", "string")
    types = types if isinstance(types, list) else [types]
    options: list[st.SearchStrategy[Any]] = []
    for t in types:
        if t == "string":
            options.append(st.sampled_from(schema["enum"]) if "enum" in schema else JUNK)
        elif t == "integer":
            options.append(st.integers(-3, 40))
        elif t == "boolean":
            options.append(st.booleans())
        elif t == "object":
            options.append(st.dictionaries(SAFE, JUNK | st.integers(), max_size=3))
    options.append(st.none() | st.integers() | st.lists(st.integers(), max_size=2))
    return st.one_of(*options)


def _body(schema: dict[str, Any]) -> st.SearchStrategy[Any]:
    props = {k: _value(v, k) for k, v in schema["properties"].items() if k != "wait"}
    shaped = st.fixed_dictionaries({}, optional=props)
    return st.one_of(shaped, shaped, shaped, JUNK, st.lists(st.integers(), max_size=2))


@st.composite
def api_request(
    draw: st.DrawFn, spec: dict[str, Any], site: Site
) -> tuple[str, str, dict[str, str], Any]:
    from urllib.parse import quote

    path = draw(st.sampled_from(sorted(spec["paths"])))
    method = draw(st.sampled_from(sorted(spec["paths"][path])))
    op = spec["paths"][path][method]
    known = {
        "run_id": [site.hero, site.gated, site.hero[:8], "nope-nope"],
        "gate": ["review", "nope"],
        "step": ["prompt", "generate", "nope"],
        "digest": ["0" * 64, "g" * 64],
    }
    query: dict[str, str] = {}
    for p in op.get("parameters", []):
        if p["in"] == "path":
            value = draw(st.sampled_from(known[p["name"]]) | JUNK.filter(bool))
            path = path.replace("{" + p["name"] + "}", quote(value, safe=""))
        elif p["in"] == "query" and draw(st.booleans()):
            query[p["name"]] = str(draw(_value(p["schema"], p["name"]) | JUNK))
    body = None
    if "requestBody" in op:
        body = draw(_body(op["requestBody"]["content"]["application/json"]["schema"]))
    return method.upper(), path, query, body


def test_no_request_from_the_openapi_paths_fails_the_server(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    site = build_site(tmp_path_factory.mktemp("fuzz"))
    with site.client() as client:
        spec = client.get("/api/openapi.json").json()
        seen: set[int] = set()

        @settings(
            max_examples=300,
            deadline=None,
            derandomize=True,
            suppress_health_check=[HealthCheck.too_slow],
        )
        @given(req=api_request(spec, site))
        def check(req: tuple[str, str, dict[str, str], Any]) -> None:
            method, path, query, body = req
            headers = {**AUTH, "Origin": ORIGIN, "Accept": "application/json"}
            res = client.request(method, path, params=query, json=body, headers=headers)
            seen.add(res.status_code)
            assert res.status_code < 500, (method, path, query, body, res.text)
            if res.status_code >= 400:
                err = res.json()
                assert err["error"]["message"] and err["exit_code"] in (1, 2, 3), err

        check()
    assert 200 in seen and 404 in seen and 400 in seen


def test_decide_then_the_run_continues_in_the_server(site: Site, client: TestClient) -> None:
    url = f"/api/runs/{site.gated2}/gates/review/decide"
    res = client.post(url, json={"decision": "approve", "by": "eve"}, headers=AUTH)
    assert res.status_code == 200, res.text
    assert res.json()["resumed"] is True
    deadline = time.monotonic() + 30
    status = None
    while time.monotonic() < deadline:
        status = client.get(f"/api/runs/{site.gated2}").json()["run"]["status"]
        if status not in ("running", "awaiting_human"):
            break
        time.sleep(0.1)
    assert status == "completed"
    assert cli_json(site, "runs", "show", site.gated2)["run"]["status"] == "completed"


def test_step_output_is_served_on_demand(site: Site, client: TestClient) -> None:
    page = client.get(f"/runs/{site.hero}").text
    assert 'class="lazy-out" data-step="prompt"' in page and "A striking" not in page
    res = client.get(f"/api/runs/{site.hero}/steps/prompt/output")
    assert res.status_code == 200
    assert res.json()["output"]["text"].startswith("A striking")
    missing = client.get(f"/api/runs/{site.hero}/steps/nope/output")
    assert missing.status_code == 404
    assert missing.json()["error"]["message"] == f"run {site.hero} has no step 'nope'"


def test_the_api_root_without_its_slash_answers_in_json(client: TestClient) -> None:
    """`/api/objects/..` is normalised by a client to `/api`: still the API, so its 404 is the
    API's JSON error, not the HTML page (the OpenAPI fuzz drew it)."""
    for path in ("/api", "/api/objects/.."):
        res = client.get(path, headers={**AUTH, "Origin": ORIGIN, "Accept": "application/json"})
        assert res.status_code == 404, res.text
        assert res.json()["error"]["type"] == "NotFound", res.text
