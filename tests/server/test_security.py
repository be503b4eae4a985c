"""Who gets in, through a real server: token, cookie exchange, Host, Origin, headers, logs.

Every check here has a test that fails when the check is removed: each test sends the same
request once with the right value (accepted) and once with the wrong one (refused).
"""

from __future__ import annotations

import socket
from typing import Any

import httpx
import pytest
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

from tests.conftest import LiveServer

SECURITY_HEADERS = ("content-security-policy", "x-content-type-options", "x-frame-options", "referrer-policy")


def test_api_needs_the_token_but_health_does_not(server: LiveServer) -> None:
    assert httpx.get(f"{server.url}/api/health").json()["status"] == "ok"
    assert httpx.get(f"{server.url}/api/runs").status_code == 401
    wrong = httpx.get(f"{server.url}/api/runs", headers={"Authorization": "Bearer " + "x" * 32})
    assert wrong.status_code == 401 and "wrong token" in wrong.json()["detail"]
    assert httpx.get(f"{server.url}/api/runs", headers=server.headers).status_code == 200
    assert httpx.get(f"{server.url}/api/runs", params={"token": server.token}).status_code == 200
    assert httpx.get(f"{server.url}/api/openapi.json").status_code == 401


def test_page_url_trades_the_token_for_an_httponly_strict_cookie(server: LiveServer) -> None:
    with httpx.Client(base_url=server.url) as browser:
        answer = browser.get(f"/?token={server.token}&run=abc")
        assert answer.status_code == 303
        assert answer.headers["location"] == "/?run=abc"  # the token leaves the address bar
        cookie = answer.headers["set-cookie"]
        assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and "Path=/" in cookie
        assert browser.get("/api/runs").status_code == 200  # the cookie now authenticates
    with httpx.Client(base_url=server.url) as stranger:
        assert stranger.get("/?token=" + "y" * 32).status_code == 401
        assert stranger.get("/api/runs").status_code == 401


def test_websockets_need_the_token(server: LiveServer) -> None:
    with pytest.raises(InvalidStatus) as refused:
        with server.connect("/ws/ingest", auth=False):
            pass
    assert refused.value.response.status_code == 401
    assert b"missing token" in refused.value.response.body
    with server.connect(f"/ws/ingest?token={server.token}", auth=False) as ws:
        assert b"hello" in ws.recv(timeout=5).encode()


def test_host_header_of_another_name_is_refused(server: LiveServer) -> None:
    """DNS rebinding: evil.example resolving to 127.0.0.1 still sends Host: evil.example."""
    ok = httpx.get(f"{server.url}/api/runs", headers={**server.headers, "host": f"localhost:{server.port}"})
    assert ok.status_code == 200
    bad = httpx.get(f"{server.url}/api/runs", headers={**server.headers, "host": f"evil.example:{server.port}"})
    assert bad.status_code == 403 and "evil.example" in bad.json()["detail"]
    assert httpx.get(f"{server.url}/api/health", headers={"host": "evil.example"}).status_code == 403
    # One Host header, as a browser on a rebound name sends it: the URI names evil.example, the
    # socket goes to the dashboard (a second Host header would be refused earlier, as malformed).
    sock = socket.create_connection(("127.0.0.1", server.port))
    with pytest.raises(InvalidStatus) as refused:
        with connect(f"ws://evil.example:{server.port}/ws/ingest", sock=sock, additional_headers=server.headers,
                     open_timeout=60):
            pass
    assert refused.value.response.status_code == 403


def test_websocket_origin_must_be_the_dashboard_itself(server: LiveServer) -> None:
    with server.connect("/ws/ingest", origin=f"http://127.0.0.1:{server.port}") as ws:
        assert "hello" in ws.recv(timeout=5)
    with pytest.raises(InvalidStatus) as refused:
        with server.connect("/ws/ingest", origin="http://evil.example"):
            pass
    assert refused.value.response.status_code == 403
    assert b"Origin" in refused.value.response.body


def test_cross_origin_posts_are_refused_even_with_the_cookie(server: LiveServer) -> None:
    body = {"scenario": "nope"}
    same = httpx.post(f"{server.url}/api/runs", json=body, headers={**server.headers, "origin": server.url})
    assert same.status_code == 422  # got through the guard to validation
    other = httpx.post(f"{server.url}/api/runs", json=body,
                       headers={**server.headers, "origin": f"http://127.0.0.1:{server.port + 1}"})
    assert other.status_code == 403


@pytest.mark.parametrize("path", ["/api/health", "/api/runs", "/api/runs/nope", "/", "/no/such/file.js"])
def test_every_answer_carries_security_headers(server: LiveServer, path: str) -> None:
    answer = httpx.get(server.url + path)
    for name in SECURITY_HEADERS:
        assert name in answer.headers, (path, name)
    csp = answer.headers["content-security-policy"]
    assert "*" not in csp and "frame-ancestors 'none'" in csp
    assert answer.headers["x-content-type-options"] == "nosniff"


def test_the_token_is_printed_once_and_never_logged(server: LiveServer) -> None:
    httpx.get(f"{server.url}/api/runs", params={"token": server.token})
    httpx.get(f"{server.url}/?token={server.token}")
    with server.connect(f"/ws/ingest?token={server.token}", auth=False) as ws:
        ws.recv(timeout=5)
    output = server.output()
    assert "token=[redacted]" in output
    assert output.count(server.token) == 1, "only the printed URL may hold the token"


def test_an_allowed_origin_gets_cors_answers_and_others_do_not(start_server: Any) -> None:
    dev = "http://localhost:5173"
    server = start_server(allow_origins=[dev])
    preflight = httpx.options(f"{server.url}/api/runs", headers={
        "origin": dev, "access-control-request-method": "POST", "access-control-request-headers": "authorization"})
    assert preflight.status_code == 200 and preflight.headers["access-control-allow-origin"] == dev
    answer = httpx.get(f"{server.url}/api/runs", headers={**server.headers, "origin": dev})
    assert answer.status_code == 200 and answer.headers["access-control-allow-origin"] == dev
    assert httpx.get(f"{server.url}/api/runs", headers={"origin": dev}).status_code == 401  # still needs the token
    evil = httpx.options(f"{server.url}/api/runs", headers={
        "origin": "http://evil.example", "access-control-request-method": "POST"})
    assert evil.status_code == 403
    with server.connect("/ws/ingest", origin=dev) as ws:
        assert "hello" in ws.recv(timeout=5)
