from ember_core._include import get_include
