"""The engine builder: model graphs, engine specs and cache, and the inference backends."""
