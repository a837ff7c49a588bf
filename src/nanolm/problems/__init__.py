"""Graded problems: exercises solved in a working folder and checked by tests that draw random
shapes, seeds and models, run in a separate process with a time limit.

``registry`` holds the problems (no torch), ``checks`` their tests, ``runner`` the grading
process, ``grading`` the side that starts it, ``workspace`` the learner's folder and state file.
"""
