"""The project as a whole: its layout, the guides' examples, the install and its extras, the rename, the
habits a fork inherits, the contracts, the private APIs of other libraries it uses."""
