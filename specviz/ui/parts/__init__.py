"""The page's parts, each built and wired in its own module (Gradio's own demos' style): a part's `build` lays out its
components inside the open Blocks and wires its own events with explicit inputs and outputs, and returns what other
parts need. A part that shows a recorded run also answers a runs.Update with {component: value} (its `show`);
screen.Screen sends each Update to all of them. app.py only lays the parts out and connects them."""
