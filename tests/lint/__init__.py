"""The lints of tests/meson.build; tests import doc_blocks.doc_block from here."""
