"""Model files to served versions.

    vetting      static checks of a model file before ONNX Runtime sees it (onnx_ml_pb2: the schema)
    sandbox      a new file loaded, warmed and golden-checked in a capped child process first
    onnx         the ONNX Runtime adapter: providers, session options, load, warm-up, predict
    repository   where model files come from: a local directory or a Blob container, same layout
    served       one served version: its warmed session, feature mapper and micro-batcher
    registry     which versions are loaded, which one is active, and their lifecycle
    ensembles    several served models answering as one name

The metadata contract every file declares is `shared.domain.spec`.
"""
