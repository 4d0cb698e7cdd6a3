"""`python -m specviz.train`: train the bundled pair (the pipeline lives in specviz.training.bundled_pair)."""

from specviz.training.bundled_pair import main

if __name__ == "__main__":
    main()
