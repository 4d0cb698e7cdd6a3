"""`python -m specviz.train`: train the bundled pair (the pipeline lives in specviz.training.pipeline)."""

from specviz.training.pipeline import main

if __name__ == "__main__":
    main()
