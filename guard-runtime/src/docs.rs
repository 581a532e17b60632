//! Transition docs generated from a machine: Mermaid, Graphviz DOT and
//! Markdown.
