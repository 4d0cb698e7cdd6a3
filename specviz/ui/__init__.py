"""The teaching app's views: pure functions from a Trace to HTML and plotly figures."""
