"""The measuring worker's loop, run in the fresh interpreter a measure.Runner starts: it
answers run (measure.py), features and compare (compare.py) payloads until told to stop."""
from __future__ import annotations

import signal
import traceback
from multiprocessing.connection import Connection

from .compare import run_compare
from .measure import MeasureResult, MeasureStatus, features_payload, run_payload


def serve(read_fd: int, write_fd: int) -> None:
    """The worker loop: receive a payload, answer with a MeasureResult, until told to stop.

    Runs in a fresh interpreter started by Runner (not multiprocessing's spawn, which would
    re-import the user's __main__ module).
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)   # Ctrl-C is the parent's to handle
    inbox = Connection(read_fd, writable=False)
    outbox = Connection(write_fd, readable=False)
    outbox.send("ready")
    held: dict = {}   # task token -> measure's held task and data
    while True:
        try:
            payload = inbox.recv()
        except EOFError:
            return
        if payload is None:
            return
        try:
            if payload.get("kind") == "features":
                result = features_payload(payload, held)
            elif payload.get("kind") == "compare":
                result = run_compare(payload, held)
            else:
                result = run_payload(payload, held)
        except Exception:  # noqa: BLE001 - never let one candidate kill the worker loop
            result = MeasureResult(MeasureStatus.RUNTIME_ERROR, error_text=traceback.format_exc())
        outbox.send(result)
