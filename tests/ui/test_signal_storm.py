"""Guards the PySide6 6.12.0 / Python < 3.12 trap: a refcount bug aborted after ~2,000 emits."""

from PySide6.QtCore import QObject, Signal


class Emitter(QObject):
    sig = Signal(object)
    sig_bool = Signal(bool)


class Receiver(QObject):
    def __init__(self):
        super().__init__()
        self.count = 0
        self.flags = 0

    def on(self, value):
        self.count += 1

    def on_bool(self, value: bool):
        self.flags += value


def test_ten_thousand_emits_survive(qapp):
    e, r = Emitter(), Receiver()
    e.sig.connect(r.on)
    e.sig_bool.connect(r.on_bool)
    for n in range(10_000):
        e.sig.emit(n)
        e.sig_bool.emit(n % 2 == 0)
    qapp.processEvents()
    assert r.count == 10_000
    assert r.flags == 5_000
