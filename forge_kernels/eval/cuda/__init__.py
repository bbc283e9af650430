"""CUDA C++ candidates (KernelBench's ``load_inline`` format) as a language plug-in of the
evaluator: read the extension specs from the source (:mod:`.source`), check them (:mod:`.policy`),
build them outside the jail (:mod:`.build`), and run the candidate in a jailed child that loads the
prebuilt libraries (:mod:`.child`); :mod:`.evaluate` ties them to the :class:`Evaluator`'s
language-plug-in methods (``reference``, ``run_candidate``, ``judge``, ``result``)."""
