"""One colour legend everywhere (docs/algorithm.md): Okabe–Ito shades, each state with a second, non-colour cue."""

from __future__ import annotations

from specviz.colours import COLOURS

__all__ = ["COLOURS", "CSS", "LEGEND"]

LEGEND = [  # (status, label, second cue)
    ("prompt", "prompt", "plain"),
    ("drafted", "drafted, not yet verified", "dashed outline"),
    ("accepted", "accepted draft token", "solid"),
    ("rejected", "rejected draft token", "struck through"),
    ("unverified", "never tested (after a rejection)", "faded, dotted"),
    ("resampled", "resampled by the target", "underlined"),
    ("bonus", "bonus token (all drafts accepted)", "star"),
]

CSS = """
:root { --sv-accepted: #009E73; --sv-rejected: #D55E00; --sv-resampled: #0072B2; --sv-bonus: #9B4F96;
        --sv-drafted: #8c8c8c; --sv-unverified: #b5b5b5; --sv-prompt: #4b5563; }
.sv-stream { font-family: ui-monospace, 'JetBrains Mono', Menlo, Consolas, monospace; font-size: 1.05rem; line-height: 2.0;
             white-space: pre-wrap; word-break: break-word; padding: 12px 14px; border-radius: 10px;
             background: var(--block-background-fill); border: 1px solid var(--border-color-primary); min-height: 5.5em; }
.sv-tok { --c: transparent; position: relative; cursor: help; }
.sv-user { font-family: var(--font); white-space: pre-wrap; margin: 0 0 10px auto; max-width: 85%; width: fit-content;
           padding: 6px 12px; border-radius: 12px 12px 2px 12px; background: var(--background-fill-secondary);
           border: 1px solid var(--border-color-primary); color: var(--body-text-color-subdued); }
.sv-user::before { content: "user"; display: block; font-size: 0.7rem; text-transform: uppercase; letter-spacing: 0.05em; opacity: 0.7; }
.sv-tok .sv-special { font-size: 0.7rem; font-variant: small-caps; opacity: 0.8; }
.sv-tok .sv-partial { opacity: 0.6; }
.sv-tok .sv-txt { border-radius: 4px; padding: 1px 1px; margin: 0 0.5px; }
.sv-tok[data-status=prompt] { color: var(--body-text-color-subdued); }
.sv-tok[data-status=drafted] { --c: var(--sv-drafted); }
.sv-tok[data-status=drafted] .sv-txt { color: var(--sv-drafted); outline: 1.5px dashed var(--sv-drafted); outline-offset: -1px; }
.sv-tok[data-status=accepted] { --c: var(--sv-accepted); }
.sv-tok[data-status=rejected] { --c: var(--sv-rejected); }
.sv-tok[data-status=resampled] { --c: var(--sv-resampled); }
.sv-tok[data-status=bonus] { --c: var(--sv-bonus); }
.sv-tok[data-status=accepted] .sv-txt, .sv-tok[data-status=rejected] .sv-txt,
.sv-tok[data-status=resampled] .sv-txt, .sv-tok[data-status=bonus] .sv-txt { background: var(--c); color: #fff; }
.sv-tok[data-status=rejected] .sv-txt { text-decoration: line-through 2px; }
.sv-tok[data-status=unverified] { --c: var(--sv-unverified); opacity: .75; }
.sv-tok[data-status=unverified] .sv-txt { color: var(--sv-unverified); outline: 1.5px dotted var(--sv-unverified); outline-offset: -1px; }
.sv-tok[data-status=resampled] .sv-txt { text-decoration: underline 2px; text-underline-offset: 3px; }
.sv-tok[data-status=bonus]::before { content: "★"; font-size: .6em; vertical-align: super; margin-right: 1px; color: var(--sv-bonus); }
.sv-tok .sv-ws { box-shadow: inset 0 -3px 0 var(--c); }
.sv-tok .sv-nl { color: var(--c); font-size: .7em; padding: 0 1px; }
.sv-stop { font-size: .65em; color: var(--sv-predicted, #E69F00); cursor: help; position: relative; vertical-align: super; }
.sv-stop[data-tip]:hover::after { content: attr(data-tip); position: absolute; left: 0; top: 1.9em; z-index: 50; white-space: pre;
             background: #111827; color: #f9fafb; padding: 6px 9px; border-radius: 6px; font-size: .78rem; }
.sv-tok.sv-current .sv-txt { box-shadow: 0 0 0 2px var(--body-text-color); }
.sv-tok[data-tip]:hover::after { content: attr(data-tip); position: absolute; left: 0; top: 1.9em; z-index: 50; white-space: pre;
             background: #111827; color: #f9fafb; padding: 6px 9px; border-radius: 6px; font-size: .78rem; line-height: 1.45;
             box-shadow: 0 4px 14px rgba(0,0,0,.3); pointer-events: none; text-decoration: none; }
.sv-sep { display: inline-block; position: relative; width: 0; height: 1.2em; border-left: 2px solid var(--border-color-primary);
          margin: 0 2px; vertical-align: middle; }
.sv-sep::after { content: attr(data-label); position: absolute; top: -0.95em; left: -0.3em; font-size: .5rem; line-height: 1;
                 color: var(--body-text-color-subdued); pointer-events: none; }
.sv-legend { display: flex; flex-wrap: wrap; gap: 6px 12px; font-size: .85rem; align-items: center; margin: 2px 0 6px; }
.sv-legend .sv-tok { cursor: default; font-family: ui-monospace, Menlo, monospace; }
.sv-lossy { display: inline-block; background: var(--sv-rejected); color: #fff; font-weight: 700; padding: 2px 8px; border-radius: 6px; margin: 4px 0; }
.sv-rounding { border-bottom: 1px dotted currentColor; cursor: help; }
.sv-race { display: grid; grid-template-columns: 1fr 1fr; gap: 12px; }
@media (max-width: 760px) { .sv-race { grid-template-columns: 1fr; } }
.sv-lane { border: 1px solid var(--border-color-primary); border-radius: 10px; padding: 10px 12px; background: var(--block-background-fill); }
.sv-lane h4 { margin: 0 0 4px; font-size: .95rem; }
.sv-lane .sv-stats { font-size: .85rem; color: var(--body-text-color-subdued); margin-bottom: 6px; }
.sv-lane .sv-text { font-family: ui-monospace, Menlo, monospace; white-space: pre-wrap; word-break: break-word; font-size: .9rem; min-height: 6em; }
.sv-lane .sv-text span { opacity: 0; animation: sv-appear 0.01s linear forwards; }
.sv-bar { height: 6px; border-radius: 3px; background: var(--border-color-primary); overflow: hidden; margin-bottom: 6px; }
.sv-bar > div { height: 100%; width: 100%; transform: scaleX(0); transform-origin: left; will-change: transform;
                animation-name: sv-grow; animation-timing-function: linear; animation-fill-mode: forwards; }  /* transform, not width: no layout per frame */
@keyframes sv-appear { to { opacity: 1; } }
@keyframes sv-grow { to { transform: scaleX(1); } }
.sv-verdict { font-size: 1.05rem; padding: 8px 12px; border-radius: 8px; border-left: 5px solid var(--sv-accepted); background: var(--block-background-fill); }
.sv-verdict.sv-no { border-left-color: var(--sv-rejected); }
.sv-narration { font-size: 1.02rem; min-height: 2.6em; }
.sv-verdict.sv-even { border-left-color: var(--sv-drafted); }
.sv-numbers { font-size: .95rem; padding: 8px 12px; border-radius: 8px; background: var(--block-background-fill);
              border: 1px solid var(--border-color-primary); min-height: 2.2em; }
.sv-numbers[data-state=measuring], .sv-numbers[data-state=waiting] { border-style: dashed; color: var(--body-text-color-subdued); }
.sv-numbers .sv-big { font-size: 1.5rem; font-weight: 800; color: var(--sv-accepted); margin-right: 4px; }
.sv-numbers .sv-busy { color: var(--sv-rejected); font-size: .9rem; }
.sv-lesson-text:empty { display: none; }
.sv-lesson-text { font-size: 1rem; padding: 4px 12px; border-left: 5px solid var(--sv-predicted, #E69F00); }
.sv-lesson-text table { font-size: .9rem; margin: 6px 0; }
.sv-lesson-text td, .sv-lesson-text th { padding: 2px 10px; text-align: right; }
.sv-diff { font-family: ui-monospace, Menlo, monospace; white-space: pre-wrap; font-size: .88rem; padding: 6px 8px;
           background: var(--block-background-fill); border-radius: 6px; }
.sv-diff del { background: #fde0d2; color: #8a2c00; text-decoration: line-through; }
.sv-diff ins { background: #d2f0e6; color: #00573f; text-decoration: underline; }
.sv-tree { margin: 6px 0 4px; padding: 8px 12px 12px; border-radius: 10px; background: var(--block-background-fill);
           border: 1px solid var(--border-color-primary); }
.sv-tree-caption { font-size: .85rem; color: var(--body-text-color-subdued); margin-bottom: 8px; }
.sv-tree-area { position: relative; font-family: ui-monospace, 'JetBrains Mono', Menlo, Consolas, monospace; font-size: .9rem; }
.sv-tree-edges { position: absolute; left: 0; top: 0; overflow: visible; }
.sv-edge { fill: none; stroke: var(--sv-drafted); stroke-width: 1.3; }
.sv-edge[data-kind=path] { stroke: var(--sv-accepted); stroke-width: 3.5; }
.sv-edge[data-kind=rejected] { stroke: var(--sv-rejected); }
.sv-edge[data-kind=unverified] { stroke: var(--sv-unverified); stroke-dasharray: 2 3; }
.sv-edge[data-kind=drafted] { stroke-dasharray: 5 3; }
.sv-edge[data-kind=resampled] { stroke: var(--sv-resampled); stroke-width: 3.5; stroke-dasharray: 6 3; }
.sv-edge[data-kind=bonus] { stroke: var(--sv-bonus); stroke-width: 3.5; stroke-dasharray: 6 3; }
.sv-node { position: absolute; width: 96px; height: 24px; display: flex; align-items: center; white-space: nowrap; }
.sv-node .sv-tok .sv-txt { display: inline-block; max-width: 88px; overflow: hidden; text-overflow: ellipsis; vertical-align: middle;
           white-space: pre; line-height: 1.35; }
.sv-node .sv-txt { background: var(--block-background-fill); }  /* edges leave from behind the box */
.sv-node.sv-on-path .sv-txt { font-weight: 800; box-shadow: 0 0 0 2px var(--body-text-color); }
.sv-node[data-node="-1"] .sv-txt { border: 1px solid var(--border-color-primary); padding: 1px 4px; }
.sv-tree-mark { font-size: .7em; color: var(--sv-drafted); cursor: help; position: relative; vertical-align: super; }
.sv-tree-mark[data-tip]:hover::after { content: attr(data-tip); position: absolute; left: 0; top: 1.9em; z-index: 50; white-space: pre;
             background: #111827; color: #f9fafb; padding: 6px 9px; border-radius: 6px; font-size: .78rem; }
.sv-tree.sv-tree-wide { overflow-x: auto; }
@media (max-width: 760px) { .sv-tree { overflow-x: auto; } }

"""
