"""An in-memory switch port for tests that run the embedded switch without sockets."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Wire:
    """A switch port whose transmitted frames the test reads (Switch only calls send() and
    close() on its ports)."""

    number: int
    sent: list[bytes] = field(default_factory=list)

    def send(self, frame: bytes) -> None:
        self.sent.append(frame)

    def close(self) -> None:
        pass
