"""The text-to-image generator kinds, one module each (`tools.t2i.kind.GeneratorKind` records); the registry
`tools.t2i.registry` collects them."""
