"""The waste model's pure core: numpy and the standard library, no Django, no database.

Inputs in (phantomhub.waste.core.inputs), an accumulated state per run (accumulator, state),
and an Analysis out (finalize, result); the service layer (phantomhub.waste.services) reads rows
and writes results around it. The import contract in .importlinter keeps Django out of this
package; docs/architecture.md, "The pure core".
"""
