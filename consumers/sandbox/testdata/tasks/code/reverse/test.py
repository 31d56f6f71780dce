def test_word(s):
    assert s.reverse("abc") == "cba"


def test_empty(s):
    assert s.reverse("") == ""
