"""splitmix64, draw for draw as correction/splitmix_test.go: the Python scripts that rebuild the Go
tests' inputs from a seed (gen_isotonic_golden.py here, bench/reference_bench.py) share it, so
both languages produce the same bits (only correctly rounded IEEE operations)."""

M64 = (1 << 64) - 1
TWO_M53 = 1.0 / 9007199254740992.0  # 2**-53


class SplitMix64:
    def __init__(self, seed):
        self.s = seed & M64

    def next(self):
        self.s = (self.s + 0x9E3779B97F4A7C15) & M64
        z = self.s
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
        return z ^ (z >> 31)

    def u(self):
        """A uniform double in [0,1) with 53 random bits."""
        return float(self.next() >> 11) * TWO_M53
