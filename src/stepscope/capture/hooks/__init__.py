"""Framework hooks of the host capture (PyTorch, JAX, Keras, TensorFlow, NVTX), installed without importing them.

The bootstrap starts the capture before the user's code imports torch, and importing
``torch.utils.data`` ourselves would cost a second and change the program. So a
``sys.meta_path`` finder (``post_import``) watches for the modules of each hook family and
patches them right after they are executed (a post-import hook); modules already imported are
patched at once. ``install.TorchHooks`` installs and removes them all.

One module per hook family:

- ``dataloader``: ``torch.utils.data`` DataLoader input waits and loader settings;
- ``optimizer``: ``torch.optim`` optimizer steps (a global step post-hook);
- ``jax_steps``: ``jax.profiler.StepTraceAnnotation`` entered, a step marker;
- ``keras_steps``: ``CallbackList.on_train_batch_end``, a step marker;
- ``tf_steps``: ``tf.profiler.experimental.Trace(name, step_num=N)`` entered, a step marker;
- ``nvtx_steps``: NVTX ranges named by ``--nvtx NAME``, step markers.

Wrappers never change behaviour: results and exceptions (``StopIteration`` included) pass
through untouched; ``uninstall()`` restores the original attributes (when someone wrapped them
again after us, our wrapper stays but turns into a plain pass-through: ``patching.Patch``).
"""
