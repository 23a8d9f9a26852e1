"""What the postgrest-py scripts share: the client for the Rowgate at ROWGATE_URL (its REST
prefix included), and each call's outcome as JSON (its data, or its error)."""
import os

from postgrest import APIError, SyncPostgrestClient

client = SyncPostgrestClient(os.environ["ROWGATE_URL"])


def outcome(call):
    try:
        return {"data": call().data, "error": None}
    except APIError as e:
        return {"data": None, "error": {"code": e.code, "message": e.message, "hint": e.hint}}
