"""The ``pbtree`` command, a layer on top of the library: ``main`` parses and runs it, and the
other modules hold its streams, shared options, stops, progress meter and messages.

The library never imports this package, and this file imports nothing, so that
``spark_loader.cli`` can load ``pbtree.cli.common`` without loading the command.
"""
