def test_small(s):
    assert s.add(2, 3) == 5


def test_negative(s):
    assert s.add(-2, -3) == -5


def test_zero(s):
    assert s.add(0, 0) == 0


def test_large(s):
    assert s.add(10**18, 1) == 10**18 + 1
