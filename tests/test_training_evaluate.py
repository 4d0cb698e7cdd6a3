"""The measures the training report quotes: distinct-4 and the syntax check of a cut completion."""

from specviz.prompts.sets import heldout_code_prompts
from specviz.training.evaluate import distinct_n, parses_as_python


def test_distinct_4_is_one_without_repeats_and_low_for_a_loop():
    assert distinct_n(list(range(10))) == 1.0
    loop = [1, 2, 3] * 10  # 27 four-grams, 3 distinct
    assert distinct_n(loop) == 3 / 27
    assert distinct_n([1, 2, 3]) == 0.0, "fewer than four tokens have no 4-gram"


def test_a_cut_completion_is_judged_up_to_its_last_complete_line():
    assert parses_as_python("x = 1\ny = [2,\n") is False, "an unclosed bracket at the cut still fails"
    assert parses_as_python("x = 1\ny = (x +")  # the partial last line is dropped
    assert parses_as_python("x = 1\ny = (x +", complete=True) is False, "complete text is not cut"


def test_indented_windows_and_open_blocks_are_allowances_for_the_cut_only():
    assert parses_as_python("        return x\n    def f(self):\n        if self.y:\n")
    assert not parses_as_python("    return x\n  y = 2\n"), "an inconsistent dedent is still an error"
    assert not parses_as_python("def f(:\n    pass\n")


def test_heldout_prompts_are_fixed_standard_library_windows():
    prompts = heldout_code_prompts()
    assert len(prompts) == 8 and prompts == heldout_code_prompts()
    assert all(not p.endswith("\n") for p in prompts), "prompts end after a line's text, not its newline"
