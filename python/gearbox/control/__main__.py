"""`gearbox control` (also `python -m gearbox.control`): the control plane's commands.

    gearbox control serve --config control.toml
    gearbox control token create --role edge --name edge-1 --config control.toml
    gearbox control policy push GEAR DIR [--training-data FILE] [--activate] [--scope S]
    gearbox control policy activate GEAR VERSION [--scope S]
    gearbox control policy rollback GEAR [--to VERSION] [--scope S]
    gearbox control policy list GEAR
    gearbox control agent --spool DIR [--tail FILE]... [--policies DIR]   # an edge's or client's side
    gearbox control openapi                 # the API's OpenAPI schema (JSON)
    gearbox control bench [--records N]     # = gearbox bench control: figures, not a test
    gearbox control loop [--out DIR]        # the closed loop with a native edge and client (checks, figures)

The policy commands talk to a running service: --url (or $GEARBOX_CONTROL_URL), --token (or
$GEARBOX_CONTROL_TOKEN, a learner or admin token) and --cafile (or $GEARBOX_CONTROL_CA, the
service's certificate). Tokens are created against the store directly (who can read the config
can administer the service) and printed once; only their hash is stored.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path

PROG = "gearbox control"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)

    s = sub.add_parser("serve", help="run the service (HTTPS)")
    s.add_argument("--config", type=Path, default=Path("control.toml"), help="TOML file (default control.toml)")

    t = sub.add_parser("token", help="create or list bearer tokens")
    tsub = t.add_subparsers(dest="token_command", required=True)
    tc = tsub.add_parser("create", help="create a token; prints it once")
    tc.add_argument("--role", required=True, choices=["edge", "client", "agent", "learner", "admin"])
    tc.add_argument("--name", help="the peer's name (default ROLE-N); edges and clients appear under it")
    tc.add_argument("--config", type=Path, default=Path("control.toml"))
    tl = tsub.add_parser("list", help="names and roles (never the tokens)")
    tl.add_argument("--config", type=Path, default=Path("control.toml"))

    pp = sub.add_parser("policy", help="the policy registry")
    psub = pp.add_subparsers(dest="policy_command", required=True)

    def remote(q: argparse.ArgumentParser) -> None:
        q.add_argument("--url", default=os.environ.get("GEARBOX_CONTROL_URL"), help="$GEARBOX_CONTROL_URL")
        q.add_argument("--token", default=os.environ.get("GEARBOX_CONTROL_TOKEN"), help="$GEARBOX_CONTROL_TOKEN")
        q.add_argument("--cafile", default=os.environ.get("GEARBOX_CONTROL_CA"), help="$GEARBOX_CONTROL_CA")

    push = psub.add_parser("push", help="upload DIR as GEAR's next version")
    push.add_argument("gear")
    push.add_argument("dir", type=Path)
    push.add_argument("--training-data", type=Path, help="refuse unless the sidecars record this file's sha256")
    push.add_argument("--note", help="free text kept with the version")
    push.add_argument("--activate", action="store_true", help="activate it at once (needs an admin token)")
    push.add_argument("--scope", default="global")
    remote(push)
    act = psub.add_parser("activate", help="make VERSION GEAR's active version in a scope")
    act.add_argument("gear")
    act.add_argument("version", type=int)
    act.add_argument("--scope", default="global")
    remote(act)
    rb = psub.add_parser("rollback", help="back to the version active before (or --to VERSION)")
    rb.add_argument("gear")
    rb.add_argument("--to", type=int)
    rb.add_argument("--scope", default="global")
    remote(rb)
    ls = psub.add_parser("list", help="GEAR's versions, what is active, the history")
    ls.add_argument("gear")
    remote(ls)

    ag = sub.add_parser("agent", help="upload telemetry files and keep a folder on the active policies")
    ag.add_argument("--spool", type=Path, required=True, help="the on-disk queue and tail offsets")
    ag.add_argument("--tail", type=Path, action="append", default=[], help="a JSON Lines telemetry file (repeatable)")
    ag.add_argument("--policies", type=Path, help="folder kept on the active policies (GEAR/current)")
    ag.add_argument("--every", type=float, default=1.0, help="seconds between passes (default 1)")
    remote(ag)

    sub.add_parser("openapi", help="print the API's OpenAPI schema (JSON)")
    sub.add_parser("loop", help="the closed loop with a native edge and client: checks and figures (docs/control.md)")
    b = sub.add_parser("bench", help="ingestion and poll rates, memory (gearbox bench control)")
    b.add_argument("--records", type=int, default=200_000, help="records to ingest per store")
    b.add_argument("--pollers", type=int, default=1000)
    b.add_argument("--polls", type=int, default=5, help="polls per poller")
    b.add_argument("--no-postgres", action="store_true", help="embedded store only")
    b.add_argument(
        "--native-records", type=int, default=50_000, help="records in the spool the Rust uploader drains (0: skip)"
    )
    return p


class CommandError(Exception):
    pass


def _client(args: argparse.Namespace):  # noqa: ANN202 - httpx is imported lazily
    import httpx

    from gearbox.control.client import _ssl_context

    if not args.url or not args.token:
        raise CommandError("--url and --token (or $GEARBOX_CONTROL_URL and $GEARBOX_CONTROL_TOKEN) are required")
    return httpx.Client(
        base_url=args.url.rstrip("/"),
        verify=_ssl_context(args.cafile),
        timeout=60,
        headers={"Authorization": f"Bearer {args.token}"},
    )


def _answer(resp) -> dict:  # noqa: ANN001
    try:
        body = resp.json()
    except ValueError:
        body = {"detail": resp.text}
    if resp.status_code >= 300:
        raise CommandError(f"{resp.status_code}: {body.get('detail', body)}")
    return body


def _policy(args: argparse.Namespace) -> None:
    from gearbox.control import policy as pol

    with _client(args) as http:
        if args.policy_command == "push":
            data = pol.pack(args.dir)
            art = pol.check(data)  # the same checks as the registry, before uploading
            if args.training_data:
                pol.check_training_data(art, args.training_data)
            headers = {"X-Gearbox-SHA256": art.sha256, "Content-Type": "application/x-tar"}
            if args.note:
                headers["X-Gearbox-Note"] = args.note
            v = _answer(http.post(f"/v1/policies/{args.gear}/versions", content=data, headers=headers))
            print(f"{args.gear} version {v['version']}: sha256 {v['sha256']}, training data {v['training_digest']}")
            if args.activate:
                _answer(
                    http.post(f"/v1/policies/{args.gear}/activate", json={"version": v["version"], "scope": args.scope})
                )
                print(f"{args.gear} version {v['version']} active in {args.scope}")
        elif args.policy_command == "activate":
            body = {"version": args.version, "scope": args.scope}
            a = _answer(http.post(f"/v1/policies/{args.gear}/activate", json=body))
            print(f"{a['gear']} version {a['version']} active in {a['scope']}")
        elif args.policy_command == "rollback":
            a = _answer(http.post(f"/v1/policies/{args.gear}/rollback", json={"to": args.to, "scope": args.scope}))
            print(f"{a['gear']} rolled back to version {a['version']} in {a['scope']}")
        else:
            print(json.dumps(_answer(http.get(f"/v1/policies/{args.gear}/versions")), indent=2))


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["loop"]:
        from gearbox.control.loop import main as loop_main

        return loop_main(argv[1:])
    args = _parser().parse_args(argv)
    from gearbox.control import policy as pol
    from gearbox.control.config import Config, ConfigError, load
    from gearbox.control.store import StoreError

    try:
        if args.command == "serve":
            from gearbox.control.server import serve

            serve(load(args.config))
        elif args.command == "token":
            from gearbox.control.store import NAME_RE, open_store
            from gearbox.control.tokens import hash_token, new_token

            config = load(args.config)
            store = open_store(config.store, config.base)
            try:
                if args.token_command == "list":
                    for name, role, _ in store.tokens():
                        print(f"{name}\t{role}")
                    return 0
                name = args.name or f"{args.role}-{len(store.tokens()) + 1}"
                if not NAME_RE.match(name):
                    raise CommandError(f"--name {name!r}: letters, digits and _.- only (64 at most)")
                token = new_token()
                store.add_token(hash_token(token), name, args.role)
                print(token)
            finally:
                store.close()
        elif args.command == "policy":
            _policy(args)
        elif args.command == "agent":
            import signal
            import threading

            from gearbox.control.agent import run_agent

            if not args.url or not args.token:
                raise CommandError(
                    "--url and --token (or $GEARBOX_CONTROL_URL and $GEARBOX_CONTROL_TOKEN) are required"
                )
            stop = threading.Event()
            signal.signal(signal.SIGTERM, lambda *_: stop.set())
            run_agent(args.url, args.token, args.cafile, args.spool, args.tail, args.policies, args.every, stop)
        elif args.command == "openapi":
            from gearbox.control.app import create_app

            print(json.dumps(create_app(Config(path=None), _NoStore()).openapi(), indent=2))
        elif args.command == "bench":
            from gearbox.control.bench import run_bench

            run_bench(args.records, args.pollers, args.polls, not args.no_postgres, args.native_records)
    except (ConfigError, StoreError, CommandError, pol.PolicyError) as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    return 0


class _NoStore:
    """`openapi` needs the routes, not a store."""


if __name__ == "__main__":
    sys.exit(main())
