"""The version of loaderscope, in a module that imports nothing.

``loaderscope.__version__``, a trace file's header and the dashboard's health answer read it here:
a module inside the package that imported it from the package's ``__init__`` would depend on the
package's public names, and through them on the probe (docs/DESIGN.md §1, "Layers").
"""

__version__ = "0.1.0"
