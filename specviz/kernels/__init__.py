"""Native kernels and the weight forms they compute: how a linear layer's weights are kept and multiplied on a CPU.

forms.py is the one registry of weight forms (names, what each packs, whether a row's output is independent of the
rows beside it, bytes per weight, whether this CPU runs it); weight_only.py, w4a8.py and fp32rows.py are the forms' layers;
build.py compiles a C++ kernel once per machine; cpu.py reads the CPU's instruction sets; choice.py times the forms
this CPU can run on a model's shapes and keeps the fastest.
"""
