"""The teaching app's parts (app.py lays them out and wires them): views, render, texts, charts and deployment_view are
pure functions of a recorded Trace; runs, sessions and playback record a Run (the models run in the shared measuring
slot) and play it back; handlers answer the page's events, and score_tab lays out the Score tab; lessons are scenarios
with their explanations; score_panel scores a draft."""
