"""`gearbox agent` (also `python -m gearbox.flexhttp`): FlexHTTP's agent server and a client's side of it.

    gearbox agent serve --config agent.toml            # the service (docs/flexhttp.md "Agent server")
    gearbox agent token create --role client --name c1 --config agent.toml
    gearbox agent measure                              # probe exchange; prints the network features
    gearbox agent upload FILE.jsonl --spool DIR        # trace entries, one JSON object a line
    gearbox agent train [--k K]                        # labels + global forest, a new version
    gearbox agent classifier --out DIR                 # download the active global classifier

The client commands take --url (or $GEARBOX_AGENT_URL), --token ($GEARBOX_AGENT_TOKEN) and --cafile
($GEARBOX_AGENT_CA).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path

PROG = os.environ.get("GEARBOX_AGENT_PROG", "gearbox agent")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("serve", help="run the agent server (HTTPS + the probe port)")
    s.add_argument("--config", type=Path, default=Path("agent.toml"))
    t = sub.add_parser("token", help="create a bearer token (printed once)")
    tsub = t.add_subparsers(dest="token_command", required=True)
    tc = tsub.add_parser("create")
    tc.add_argument("--role", required=True, choices=["edge", "client", "agent", "learner", "admin"])
    tc.add_argument("--name", required=True)
    tc.add_argument("--config", type=Path, default=Path("agent.toml"))

    def remote(q: argparse.ArgumentParser) -> None:
        q.add_argument("--url", default=os.environ.get("GEARBOX_AGENT_URL"), help="$GEARBOX_AGENT_URL")
        q.add_argument("--token", default=os.environ.get("GEARBOX_AGENT_TOKEN"), help="$GEARBOX_AGENT_TOKEN")
        q.add_argument("--cafile", default=os.environ.get("GEARBOX_AGENT_CA"), help="$GEARBOX_AGENT_CA")

    remote(sub.add_parser("measure", help="measure RTT, loss and capacity against the agent"))
    u = sub.add_parser("upload", help="upload trace entries (JSON Lines)")
    u.add_argument("file", type=Path)
    u.add_argument("--spool", type=Path, required=True, help="on-disk queue: kept until the agent answers")
    remote(u)
    tr = sub.add_parser("train", help="label the pool and train the global classifier (learner, admin)")
    tr.add_argument("--k", type=int)
    remote(tr)
    c = sub.add_parser("classifier", help="download the active global classifier")
    c.add_argument("--out", type=Path, required=True)
    remote(c)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    from gearbox.control.config import ConfigError
    from gearbox.control.store import StoreError
    from gearbox.flexhttp.client import AgentClient, AgentError

    try:
        if args.command == "serve":
            import logging

            from gearbox.flexhttp.agent import serve

            logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
            serve(args.config)
            return 0
        if args.command == "token":
            from gearbox.control.store import NAME_RE, open_store
            from gearbox.control.tokens import hash_token, new_token
            from gearbox.flexhttp.agent import load

            config, _ = load(args.config)
            if not NAME_RE.match(args.name):
                raise AgentError(f"--name {args.name!r}: letters, digits and _.- only (64 at most)")
            store = open_store(config.store, config.base)
            try:
                token = new_token()
                store.add_token(hash_token(token), args.name, args.role)
            finally:
                store.close()
            print(token)
            return 0
        if not args.url or not args.token:
            raise AgentError("--url and --token (or $GEARBOX_AGENT_URL and $GEARBOX_AGENT_TOKEN) are required")
        with AgentClient(args.url, args.token, args.cafile) as client:
            if args.command == "measure":
                print(json.dumps(client.measure(), indent=1))
            elif args.command == "train":
                print(json.dumps(client.train(args.k), indent=1))
            elif args.command == "classifier":
                print(json.dumps(client.classifier(args.out), indent=1))
            else:
                up = client.uploader(args.spool)
                try:
                    with args.file.open() as f:
                        for i, line in enumerate(f, 1):
                            if line.strip():
                                try:
                                    up.add(json.loads(line))
                                except json.JSONDecodeError as e:
                                    raise AgentError(f"{args.file}:{i}: not JSON: {e}") from e
                    done = up.flush()
                    print(json.dumps({**up.stats.__dict__, "spooled": up.spooled(), "errors": up.last_errors[:5]}))
                    if not done:
                        print(f"{PROG}: the agent did not answer; the entries wait in {args.spool}", file=sys.stderr)
                        return 1
                finally:
                    up.close()
    except (ConfigError, StoreError, AgentError) as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
