"""pytest configuration for checking the chapters with nbval (``scripts/test.sh``, stage 2).

nbval (0.10 and later) executes cells with ``store_history=False``. IPython decides whether a trailing
``;`` silences a cell's result by looking at the last input in its history, so without history
``plt.plot(...);`` produces an ``execute_result`` under nbval that it did not produce when the
notebook was executed by ``scripts/execute.sh``, and the strict comparison fails. Executing with
history, as Jupyter itself does, restores the usual behaviour. nbval does not compare execution
counts, so nothing else changes.
"""

try:
    from nbval.kernel import RunningKernel
except ImportError:  # nbval not installed: nothing to adjust
    RunningKernel = None


def _execute_cell_input(self, cell_input, allow_stdin=None):
    return self.kc.execute(cell_input, store_history=True, allow_stdin=allow_stdin, stop_on_error=False)


if RunningKernel is not None:
    RunningKernel.execute_cell_input = _execute_cell_input
