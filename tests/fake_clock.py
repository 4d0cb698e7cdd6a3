"""A stand-in for the time module: sleep() moves the clock on at once, so timing logic is tested without waiting."""


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def perf_counter(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += max(seconds, 1e-6)  # a real sleep always takes some time
