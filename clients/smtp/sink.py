"""A local SMTP sink for the accounts tests (crates/rowgate/tests/accounts.rs): aiosmtpd on
127.0.0.1:PORT writes every message it receives to FOLDER as NNNN.eml (renamed into place
whole), prints "ready" once it listens, and stops when its standard input closes.

    .venv/bin/python sink.py PORT FOLDER
"""

import os
import sys

from aiosmtpd.controller import Controller


class Keep:
    """Keeps each message as a file."""

    def __init__(self, folder):
        self.folder = folder
        self.count = 0

    async def handle_DATA(self, server, session, envelope):
        self.count += 1
        path = os.path.join(self.folder, f"{self.count:04}.eml")
        with open(path + ".part", "wb") as out:
            out.write(envelope.original_content or envelope.content)
        os.rename(path + ".part", path)
        return "250 Message accepted"


def main():
    port, folder = int(sys.argv[1]), sys.argv[2]
    controller = Controller(Keep(folder), hostname="127.0.0.1", port=port)
    controller.start()
    print("ready", flush=True)
    sys.stdin.read()
    controller.stop()


if __name__ == "__main__":
    main()
