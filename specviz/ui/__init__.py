"""The teaching app's parts: views, render, texts, charts and deployment_view are pure functions of a recorded Trace;
runs, sessions and playback record a Run (the models run in the shared measuring slot) and play it back; lessons are
scenarios with their explanations; score_panel scores a draft. parts/ builds and wires each part of the page in
Gradio (app.py lays them out)."""
